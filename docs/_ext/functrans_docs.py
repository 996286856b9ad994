"""Pages and pictures of the documentation site that are computed from the code when the
site is built, so that they cannot go stale:

- the API reference: one page per public module, listing what the module exports, each
  object rendered from its docstring (``api/<module>.md``);
- the modules JAX has that functrans does not have yet (``generated/missing_modules.md``);
- pictures: how an array is split over a mesh (from ``sharding.devices_indices_map``, the
  data ``visualize_array_sharding`` prints), the compile pipeline (from the llvm backend's
  list of passes), a program before and after fusion (from the compiler's schedule), and the
  loss curves of short runs of the examples.

Everything is written under ``generated/`` and ``api/`` in the source folder; both are
ignored by git.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pathlib
import pkgutil
import subprocess
import sys


def _repository() -> pathlib.Path:
    """The checkout whose examples/ the site runs: the one around this docs folder, else
    the one functrans is installed from (the test suite builds a copy of docs/)."""
    import functrans
    for candidate in (pathlib.Path(__file__).resolve().parents[2],
                      pathlib.Path(functrans.__file__).resolve().parents[1]):
        if (candidate / "examples").is_dir():
            return candidate
    raise FileNotFoundError("no examples/ folder beside the documentation or functrans")

# Modules that hold machinery rather than an API a user calls: left out of the reference.
_NOT_API = ("functrans.backends", "functrans.testing")

# What JAX has under these names, for the modules functrans lacks (see missing_modules).
PLANNED = {
    "functrans.experimental": "`checkify` (functional error checks), `mesh_utils` "
                              "(device meshes for a topology), `io_callback`, `ode` "
                              "(`odeint`), `sparse`, `jet`, `enable_x64`/`disable_x64`",
    "functrans.extend": "what libraries build new primitives with: `Primitive`, `core.Jaxpr`, "
                        "`linear_util`, the tables of differentiation, batching and lowering "
                        "rules",
    "functrans.interpreters": "JAX's `ad`, `batching`, `partial_eval` and `mlir` rule tables "
                              "under their JAX names",
}


# ---- the API reference ------------------------------------------------------------------------

def public_modules() -> list[str]:
    """Every importable public module of functrans, sorted: no part of the name starts with
    an underscore, and compiler machinery is left out."""
    import functrans
    names = ["functrans"]
    for info in pkgutil.walk_packages(functrans.__path__, "functrans."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts) or info.name.startswith(_NOT_API):
            continue
        names.append(info.name)
    return sorted(set(names))


def _exported(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and not inspect.ismodule(v)
                 and getattr(v, "__module__", "").startswith("functrans")]
    return sorted(n for n in set(names) if hasattr(module, n))


def _directive(value) -> str:
    if inspect.isclass(value):
        return "autoclass"
    if callable(value):
        return "autofunction"
    return "autodata"


def api_page(module_name: str, seen: dict) -> str:
    """The MyST source of ``module_name``'s reference page. An object exported by several
    modules is indexed under the first (``seen``: id -> qualified name) and referred to
    from the others."""
    module = importlib.import_module(module_name)
    lines = [f"# `{module_name}`", "", "```{eval-rst}",
             f".. automodule:: {module_name}", "   :no-members:", "", "```", ""]
    names = _exported(module)
    if not names:
        lines += ["This module exports no functions or classes of its own."]
        return "\n".join(lines) + "\n"
    rst = []
    for name in names:
        value = getattr(module, name)
        if inspect.ismodule(value):
            continue
        key = id(value)
        hashable = not isinstance(value, (int, float, str, bool, tuple)) and value is not None
        qualified = f"{module_name}.{name}"
        if hashable and key in seen:
            rst += [f".. py:data:: {name}", "   :no-index:", "",
                    f"   The same object as :py:obj:`{seen[key]}`.", ""]
            continue
        if hashable:
            seen[key] = qualified
        kind = _directive(value)
        if kind == "autodata":
            # a value's docstring is its type's (a dtype's, a namespace's): name the type
            rst += [f".. py:data:: {name}", f"   :type: {type(value).__name__}", ""]
            continue
        rst += [f".. {kind}:: {qualified}"]
        if kind == "autoclass":
            rst += ["   :members:"]
        rst += [""]
    lines += ["```{eval-rst}", f".. currentmodule:: {module_name}", "", *rst, "```", ""]
    return "\n".join(lines) + "\n"


def write_api_pages(source: pathlib.Path) -> None:
    folder = source / "api"
    folder.mkdir(exist_ok=True)
    modules = public_modules()
    seen: dict = {}
    # parents first, so an object is indexed under the shortest module that exports it
    for name in sorted(modules, key=lambda m: (m.count("."), m)):
        _write(folder / f"{name}.md", api_page(name, seen))
    index = ["# API reference", "",
             "Generated from the docstrings when the site is built: one page per public "
             "module, in the order of the package tree. The compilers (`functrans.backends`) "
             "and the compiler's fuzzer (`functrans.testing`) are tools for developers of "
             "functrans; [the compiler](../compiler.md) describes them.", ""]
    index += ["```{toctree}", ":maxdepth: 1", ""]
    index += [f"{name}" for name in modules]
    index += ["```", ""]
    _write(folder / "index.md", "\n".join(index) + "\n")


# ---- modules that do not exist yet ------------------------------------------------------------

def missing_modules_table() -> str:
    """A Markdown table of JAX's modules functrans does not have (by trying to import them
    now) and of those it has, with what each holds or will hold."""
    rows = ["| module | state | contents |", "|---|---|---|"]
    for name, planned in PLANNED.items():
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if found:
            module = importlib.import_module(name)
            names = ", ".join(f"`{n}`" for n in _exported(module))
            submodules = ", ".join(f"`{info.name}`" for info in
                                   pkgutil.iter_modules(getattr(module, "__path__", []))
                                   if not info.name.startswith("_"))
            contents = "; ".join(part for part in (names, submodules and
                                                   f"submodules {submodules}") if part)
            rows.append(f"| `{name}` | exists | {contents or '(nothing exported)'} |")
        else:
            rows.append(f"| `{name}` | **missing** | planned: {planned} |")
    return "\n".join(rows) + "\n"


def jax_variables_table() -> str:
    """A Markdown table of JAX's environment variables that functrans honours, from the
    configuration's own table."""
    from functrans import _config
    rows = ["| JAX's variable | option | wins over it |",
            "|---|---|---|"]
    for variable, (option, own) in sorted(_config._JAX_VARIABLES.items()):
        rows.append(f"| `{variable}` | `{option}` | {f'`{own}`' if own else '—'} |")
    return "\n".join(rows) + "\n"


# ---- pictures ---------------------------------------------------------------------------------

def _pyplot():
    import matplotlib  # deferred: only the build of the site draws
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def draw_shardings(folder: pathlib.Path) -> None:
    """For a few specs over a 2 x 4 mesh of CPU devices: which device holds which block of
    an 8 x 8 array, as the sharding itself computes it, and ``visualize_array_sharding``'s
    text for the same arrays."""
    import functrans
    import functrans.numpy as jnp
    from functrans.sharding import NamedSharding, PartitionSpec as P
    mesh = functrans.make_mesh((2, 4), ("data", "model"))
    specs = [P("data", "model"), P("data", None), P(None, "model"), P(("data", "model"))]
    plt = _pyplot()
    colors = plt.get_cmap("tab10").colors
    fig, axes = plt.subplots(1, len(specs), figsize=(3.2 * len(specs), 3.4))
    texts = []
    for ax, spec in zip(axes, specs):
        sharding = NamedSharding(mesh, spec)
        shape = (8, 8)
        array = functrans.device_put(jnp.arange(64.0).reshape(shape), sharding)
        cells: dict = {}
        for device, index in sharding.devices_indices_map(shape).items():
            rows, cols = (index + (slice(None),) * 2)[:2]
            key = (rows.start or 0, rows.stop or shape[0], cols.start or 0, cols.stop or shape[1])
            cells.setdefault(key, []).append(device.id)
        for (r0, r1, c0, c1), ids in cells.items():
            ax.add_patch(plt.Rectangle((c0, r0), c1 - c0, r1 - r0, facecolor=colors[min(ids) % 10],
                                       alpha=0.55, edgecolor="black"))
            label = ",".join(map(str, sorted(ids)))
            ax.text((c0 + c1) / 2, (r0 + r1) / 2, label, ha="center", va="center",
                    fontsize=11 if len(ids) < 4 else 9)
        ax.set_xlim(0, shape[1])
        ax.set_ylim(shape[0], 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{spec}", fontsize=12, family="monospace")
        texts.append(f"# {spec}\n" + _captured(functrans.debug.visualize_array_sharding, array))
    fig.tight_layout()
    fig.savefig(folder / "shardings.png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    _write(folder / "shardings.txt", "\n".join(texts))


def _captured(print_fn, *args) -> str:
    """What ``print_fn(*args)`` prints."""
    import contextlib
    import io
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        print_fn(*args)
    return buffer.getvalue()


def draw_pipeline(folder: pathlib.Path) -> None:
    """The llvm backend's passes, in order, as it lists them, then code generation."""
    from functrans.backends.llvm import pipeline
    stages = [("jaxpr", "the traced program", True)]
    stages += [(p.name, "required" if p.required else "optional", p.required)
               for p in pipeline.passes(None)]
    stages += [("LLVM IR", "codegen, O2, vectorized", True),
               ("machine code", "cached on disk", True)]
    per_row = (len(stages) + 1) // 2
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.6 * per_row, 3.4))
    for i, (name, note, solid) in enumerate(stages):
        row, col = divmod(i, per_row)
        if row:  # the second row runs right to left, under the end of the first
            col = per_row - 1 - col
        x, y = col * 1.5, -row * 1.6
        ax.add_patch(plt.Rectangle((x, y), 1.2, 1, facecolor="#cfe3f7" if solid
                                   else "#f5f5f5", edgecolor="#2b5d8a",
                                   linestyle="-" if solid else "--"))
        label = name.replace("_", "_\n", 1) if len(name) > 11 else name
        ax.text(x + 0.6, y + 0.6, label, ha="center", va="center", fontsize=9,
                family="monospace")
        ax.text(x + 0.6, y + 0.17, note, ha="center", va="center", fontsize=7,
                color="#555555")
        if i == 0:
            continue
        if i == per_row:  # down from the first row to the second
            ax.annotate("", xy=(x + 0.6, y + 1), xytext=(x + 0.6, y + 1.6),
                        arrowprops={"arrowstyle": "->"})
        elif row == 0:
            ax.annotate("", xy=(x, y + 0.5), xytext=(x - 0.3, y + 0.5),
                        arrowprops={"arrowstyle": "->"})
        else:
            ax.annotate("", xy=(x + 1.2, y + 0.5), xytext=(x + 1.5, y + 0.5),
                        arrowprops={"arrowstyle": "->"})
    ax.set_xlim(-0.1, per_row * 1.5)
    ax.set_ylim(-1.7, 1.1)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(folder / "pipeline.png", dpi=100)
    plt.close(fig)


def fusion_example() -> tuple:
    """A small training-step-like function, its jaxpr and the fused schedule the compiler
    makes of it."""
    import numpy as np
    import functrans
    import functrans.numpy as jnp
    from functrans.backends.compiler.passes import run_passes
    from functrans.backends.llvm import pipeline

    def layer(w, x):
        h = jnp.tanh(x @ w)
        return jnp.sum((h - 1.0) ** 2)

    args = (np.ones((16, 8), np.float32), np.ones((4, 16), np.float32))
    closed = functrans.make_jaxpr(layer)(*args)
    plan = run_passes("llvm", pipeline.passes(closed), closed)
    return layer, closed, plan.program


_STEP_NAMES = {"DotKernel": "matrix product (BLAS)", "LoopKernel": "fused loop",
               "ReduceKernel": "fused loop with a reduction"}


def draw_fusion(folder: pathlib.Path) -> None:
    """The equations of a jaxpr (left) and the steps of its compiled schedule (right), each
    step beside the equations it took in (a step's primitives, in program order)."""
    _, closed, program = fusion_example()
    before = [e.primitive.name for e in closed.jaxpr.eqns]
    spans, start = [], 0
    for step in program.steps:
        count = max(1, min(len(getattr(step, "prims", ()) or ()), len(before) - start))
        spans.append((start, start + count, _STEP_NAMES.get(type(step).__name__,
                                                            type(step).__name__)))
        start += count
    plt = _pyplot()
    rows = len(before)
    fig, ax = plt.subplots(figsize=(8, 0.55 * rows + 0.9))
    for i, name in enumerate(before):
        y = rows - i - 1
        ax.add_patch(plt.Rectangle((0, y + 0.1), 3, 0.8, facecolor="#f7e4c8",
                                   edgecolor="#7a5a2b"))
        ax.text(1.5, y + 0.5, name, ha="center", va="center", fontsize=9, family="monospace")
    for first, last, label in spans:
        top, bottom = rows - first, rows - last
        ax.add_patch(plt.Rectangle((4.2, bottom + 0.1), 3.6, top - bottom - 0.2,
                                   facecolor="#d4ecd4", edgecolor="#2b6b2b"))
        ax.text(6.0, (top + bottom) / 2, label, ha="center", va="center", fontsize=9)
        ax.annotate("", xy=(4.2, (top + bottom) / 2), xytext=(3.0, (top + bottom) / 2),
                    arrowprops={"arrowstyle": "->", "color": "#2b6b2b"})
    ax.text(1.5, rows + 0.25, f"jaxpr: {len(before)} equations", ha="center", fontsize=10)
    ax.text(6.0, rows + 0.25, f"compiled: {len(spans)} steps", ha="center", fontsize=10)
    ax.set_xlim(-0.1, 7.9)
    ax.set_ylim(-0.1, rows + 0.7)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(folder / "fusion.png", dpi=100)
    plt.close(fig)
    _write(folder / "fusion_jaxpr.txt", closed.pretty_print())
    _write(folder / "fusion_program.txt", program.describe())


# short runs of the examples whose loss curves the site shows: (script, arguments, picture)
LOSS_CURVES = [
    ("mlp_digits.py", ["--epochs", "6", "--quiet"], "loss_mlp_digits.png"),
    ("data_parallel_mlp.py", ["--steps", "40", "--devices", "4", "--quiet", "--print-every",
                              "1000"],
     "loss_data_parallel.png"),
    ("rnn_scan.py", ["--steps", "12", "--seq-len", "30"], "loss_rnn_scan.png"),
]


def start_loss_curves(folder: pathlib.Path, scratch: str) -> list:
    """Start each example of ``LOSS_CURVES`` (a few seconds each) with --plot; they run
    while the rest of the site is generated."""
    running = []
    for script, args, picture in LOSS_CURVES:
        extra = ["--ckpt-dir", os.path.join(scratch, "checkpoints")] \
            if "mlp_digits" in script else []
        command = [sys.executable, str(_repository() / "examples" / script), *args, *extra,
                   "--plot", str(folder / picture)]
        running.append((script, subprocess.Popen(command, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, text=True,
                                                 cwd=scratch)))
    return running


def finish_loss_curves(folder: pathlib.Path, running: list) -> None:
    """Wait for the runs of :func:`start_loss_curves`; keep each one's summary line."""
    for script, process in running:
        out, err = process.communicate(timeout=300)
        if process.returncode:
            raise RuntimeError(f"examples/{script} failed:\n{out}\n{err}")
        summary = [line for line in out.splitlines() if line.startswith("summary:")]
        _write(folder / (script.replace(".py", "") + "_summary.txt"),
               summary[-1] if summary else "")


# ---- Sphinx -----------------------------------------------------------------------------------

def _write(path: pathlib.Path, text: str) -> None:
    """Write ``text`` unless the file holds it already (unchanged files are not rebuilt)."""
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def generate(app) -> None:
    import shutil
    import tempfile
    source = pathlib.Path(app.srcdir)
    folder = source / "generated"
    folder.mkdir(exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="functrans-docs-")
    try:
        running = start_loss_curves(folder, scratch)
        write_api_pages(source)
        _write(folder / "missing_modules.md", missing_modules_table())
        _write(folder / "jax_variables.md", jax_variables_table())
        draw_shardings(folder)
        draw_pipeline(folder)
        draw_fusion(folder)
        finish_loss_curves(folder, running)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


_BUILTIN_DOCSTRINGS = {(t.__doc__ or "").strip() for t in (dict, set, frozenset, list, tuple, type)}


def _drop_builtin_docstrings(app, what, name, obj, options, lines):
    """A module-level table (a dict, a set) or an alias of a builtin type
    (``stages.CompilerOptions = dict[str, ...]``) has no docstring of its own: autodoc would
    show the builtin type's, which is about ``dict`` or ``set``, not the name."""
    if lines and "\n".join(lines).strip() in _BUILTIN_DOCSTRINGS:
        lines.clear()


def setup(app):
    # the sharding pictures need a mesh of 8 CPU devices
    os.environ.setdefault("FUNCTRANS_CPU_DEVICES", "8")
    app.connect("builder-inited", generate)
    app.connect("autodoc-process-docstring", _drop_builtin_docstrings)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
