"""``functrans.lax``: the primitives under ``jax.lax``'s names and signatures.

Each primitive family module lists its public functions in ``__all__``; this module gathers
them.
"""
from __future__ import annotations

from functrans.primitives.elementwise import *  # noqa: F401,F403
from functrans.primitives.structural import *  # noqa: F401,F403
from functrans.primitives.reductions import *  # noqa: F401,F403
from functrans.primitives.indexing import *  # noqa: F401,F403
from functrans.primitives.linalg import *  # noqa: F401,F403
from functrans.primitives.sorting import *  # noqa: F401,F403
from functrans.primitives.control_flow import *  # noqa: F401,F403
from functrans.primitives.collectives import *  # noqa: F401,F403
from functrans.primitives.fft import *  # noqa: F401,F403
from functrans.primitives.windowed import *  # noqa: F401,F403
from functrans.primitives.implicit import *  # noqa: F401,F403

from functrans import _lax_linalg as linalg  # noqa: E402,F401
