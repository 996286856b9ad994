"""``python -m functrans.export``: a saved Exported as a shared library and C header.

    python -m functrans.export model.exported -o build/model [-d b=32] [--info]

reads the bytes ``Exported.serialize()`` wrote, prints its signature, and (unless
``--info``) writes ``build/model.so`` and ``build/model.h`` (see ``to_shared_library``).
"""
from __future__ import annotations

import argparse
import os
import sys
from functrans import export


def _dimension(text: str) -> tuple[str, int]:
    name, _, value = text.partition("=")
    if not name.isidentifier() or not value.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=SIZE (like b=32), got {text!r}")
    return name, int(value)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m functrans.export",
        description="Compile a serialized functrans Exported into a standalone shared "
                    "library (.so) and C header (.h).")
    parser.add_argument("exported", help="a file written with Exported.serialize()")
    parser.add_argument("-o", "--output", help="path of the library without extension "
                        "(default: the input's name); the C function is named after it")
    parser.add_argument("-d", "--dimension", type=_dimension, action="append", default=[],
                        metavar="NAME=SIZE", help="the size of a symbolic dimension")
    parser.add_argument("--info", action="store_true",
                        help="print the function's signature and stop")
    args = parser.parse_args(argv)

    try:
        with open(args.exported, "rb") as f:
            exported = export.deserialize(f.read())
    except (OSError, ValueError) as err:
        print(f"error: cannot read {args.exported}: {err}", file=sys.stderr)
        return 1
    print(f"{exported.fun_name}: ({', '.join(map(str, exported.in_avals))}) -> "
          f"({', '.join(map(str, exported.out_avals))})")
    if args.info:
        return 0
    output = args.output or os.path.splitext(args.exported)[0]
    try:
        paths = export.to_shared_library(exported, output, dimensions=dict(args.dimension))
    except (ValueError, NotImplementedError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {paths.library} and {paths.header}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
