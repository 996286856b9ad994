"""A transformer train step at a realistic size, with each library's peak memory.

Decoder-only, pre-norm, causal: 4 blocks of 8-head self-attention and a GELU MLP at width
512, batch 8 of 256 tokens, tied output projection, softmax cross-entropy and an Adam update
(written out, the same arithmetic in every library). functrans and JAX run the same source
(:func:`make_step` takes the library); PyTorch runs ``torch.func.grad`` of the same model,
eagerly and through ``torch.compile``. The "numpy" column is functrans's reference
interpreter, which every result is checked against (on the gradients the step applied: the
first moment after one step is ``(1 - b1) * grad``).

Peak memory: for each library a fresh process (``python -m benchmarks.transformer_large
IMPL``) builds the data, resets the kernel's peak-RSS counter (``/proc/self/clear_refs``),
compiles and runs two steps, and reports how far its peak resident memory (``VmHWM`` in
``/proc/self/status``) rose above the resident memory before compiling.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from benchmarks import frameworks, transformer
from benchmarks.harness import Options, Row, compare, max_error, to_leaves

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEARNING_RATE, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8
# workers report memory, the table shows it beside each library's time
MEMORY_IMPLS = ("functrans", "jax", "torch", "torch.compile")


def sizes_for(options: Options) -> dict:
    if options.quick:
        return dict(vocab=64, seq=32, width=64, heads=4, layers=1, batch=2)
    return dict(vocab=512, seq=256, width=512, heads=8, layers=4, batch=8)


def make_data(sizes: dict, seed: int = 0):
    """(params, Adam state, tokens, one-hot targets) as NumPy arrays."""
    params, tokens, targets = transformer.make_data(sizes, seed)
    zeros = lambda tree: {k: zeros(x) if isinstance(x, dict) else  # noqa: E731
                          [zeros(b) for b in x] if isinstance(x, list) else np.zeros_like(x)
                          for k, x in tree.items()}
    state = {"m": zeros(params), "v": zeros(params), "count": np.zeros((), np.float32)}
    return params, state, tokens, targets


def adam_update(tree_map, params, grads, state):
    """One Adam step (bias-corrected), with the library's ``tree_map``."""
    count = state["count"] + 1
    m = tree_map(lambda m, g: B1 * m + (1 - B1) * g, state["m"], grads)
    v = tree_map(lambda v, g: B2 * v + (1 - B2) * g * g, state["v"], grads)
    scale_m, scale_v = 1 / (1 - B1 ** count), 1 / (1 - B2 ** count)
    new = tree_map(lambda p, m, v: p - LEARNING_RATE * (m * scale_m) / ((v * scale_v) ** 0.5 + EPS),
                   params, m, v)
    return new, {"m": m, "v": v, "count": count}


def make_step(lib, heads: int):
    """The train step written against ``lib`` (functrans or jax)."""
    loss = transformer.make_loss(lib, heads)

    def step(params, state, tokens, targets):
        grads = lib.grad(loss)(params, tokens, targets)
        return adam_update(lib.tree_util.tree_map, params, grads, state)
    return step


def make_torch_step(torch, heads: int):
    """The same step in PyTorch (``torch.func.grad``; the tanh GELU, as ``nn.gelu``)."""
    F = torch.nn.functional

    def tree_map(fn, *trees):
        first = trees[0]
        if isinstance(first, dict):
            return {k: tree_map(fn, *(t[k] for t in trees)) for k in first}
        if isinstance(first, list):
            return [tree_map(fn, *items) for items in zip(*trees)]
        return fn(*trees)

    def layer_norm(x, scale, shift):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + 1e-5) * scale + shift

    def attention(x, p):
        b, t, d = x.shape
        q, k, v = (x @ p["qkv"]).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / float(np.sqrt(d // heads))
        causal = torch.ones((t, t), dtype=torch.bool).tril()
        weights = torch.softmax(torch.where(causal, scores, -1e9), dim=-1)
        return (weights @ v).transpose(1, 2).reshape(b, t, d) @ p["out"]

    def loss(params, tokens, targets):
        x = params["embed"][tokens] + params["pos"]
        for p in params["blocks"]:
            x = x + attention(layer_norm(x, p["scale1"], p["shift1"]), p)
            h = F.gelu(layer_norm(x, p["scale2"], p["shift2"]) @ p["up"] + p["up_bias"],
                       approximate="tanh")
            x = x + h @ p["down"] + p["down_bias"]
        x = layer_norm(x, params["final_scale"], params["final_shift"])
        logits = x @ params["embed"].T
        return -(F.log_softmax(logits, dim=-1) * targets).sum(dim=-1).mean()

    def step(params, state, tokens, targets):
        grads = torch.func.grad(loss)(params, tokens.long(), targets)
        return adam_update(tree_map, params, grads, state)
    return step


def moments_as_gradients(result, reference) -> float:
    """Compare the first moments, ``(1 - b1) * grad`` after one step from zero state."""
    return max_error(result[1]["m"], reference[1]["m"])


def _implementations(impls_wanted, sizes, data, torch_compile: bool) -> dict:
    """``{impl: zero-argument callable running one step}`` for the importable libraries."""
    params, state, tokens, targets = data
    impls = {}
    if "functrans" in impls_wanted or "numpy" in impls_wanted:
        ft = frameworks.load("functrans")
        step = make_step(ft, sizes["heads"])
        fargs = ft.tree_util.tree_map(ft.numpy.asarray, data)
        if "functrans" in impls_wanted:
            fn = ft.jit(step)
            impls["functrans"] = lambda: ft.block_until_ready(fn(*fargs))
        if "numpy" in impls_wanted:
            reference = ft.jit(step, backend="reference")
            impls["numpy"] = lambda: ft.block_until_ready(reference(*fargs))
    if "jax" in impls_wanted:
        jax = frameworks.load("jax")
        jfn = jax.jit(make_step(jax, sizes["heads"]))
        jargs = jax.tree_util.tree_map(jax.numpy.asarray, data)
        impls["jax"] = lambda: jax.block_until_ready(jfn(*jargs))
    if "torch" in impls_wanted or "torch.compile" in impls_wanted:
        torch = frameworks.load("torch")
        tstep = make_torch_step(torch, sizes["heads"])
        to_torch = lambda x: ({k: to_torch(v) for k, v in x.items()} if isinstance(x, dict)  # noqa: E731
                              else [to_torch(v) for v in x] if isinstance(x, list)
                              else torch.from_numpy(np.asarray(x)))
        targs = to_torch({"a": list(data)})["a"]
        if "torch" in impls_wanted:
            impls["torch"] = lambda: tstep(*targs)
        if "torch.compile" in impls_wanted and torch_compile:
            compiled = frameworks.torch_compile(tstep)
            if compiled is not None:
                impls["torch.compile"] = lambda: compiled(*targs)
    return impls


# ---- peak memory, one fresh process per library -------------------------------------------------

def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def memory_worker(impl: str, quick: bool) -> dict:
    """Peak RSS growth (MB) of compiling and running two steps with ``impl``, in this process."""
    sizes = sizes_for(Options(quick=quick))
    data = make_data(sizes)
    impls = _implementations({impl}, sizes, data, torch_compile=True)
    if impl not in impls:
        return {"error": f"{impl} is not available"}
    before = _status_kb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
    except OSError:
        pass  # then VmHWM also counts the imports' peak: an upper bound
    result = impls[impl]()
    impls[impl]()
    peak = _status_kb("VmHWM")
    leaves = to_leaves(result)
    return {"peak_growth_mb": (peak - before) / 1024, "finite": bool(all(np.all(np.isfinite(x))
                                                                        for x in leaves))}


def _run_memory_worker(impl: str, quick: bool) -> dict:
    env = dict(os.environ)
    env.pop("FUNCTRANS_CHECK_JAXPRS", None)
    cmd = [sys.executable, "-m", "benchmarks.transformer_large", impl] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, cwd=_ROOT, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:100]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def transformer_large_train_step(options: Options) -> list[Row]:
    sizes = sizes_for(options)
    data = make_data(sizes)
    wanted = set(options.available) | ({"torch.compile"} if "torch" in options.available else set())
    impls = _implementations(wanted, sizes, data, options.torch_compile)
    title = (f"transformer {sizes['layers']}x(attn+MLP) d{sizes['width']} h{sizes['heads']} "
             f"Adam step, batch {sizes['batch']}x{sizes['seq']}")
    row = compare("transformer_large", title, impls, options, tol=1e-3,
                  check=moments_as_gradients, repeats=min(options.repeats, 6))
    memory = {impl: _run_memory_worker(impl, options.quick) for impl in MEMORY_IMPLS
              if impl in impls}
    row.extra["peak_rss_growth_mb"] = {k: m.get("peak_growth_mb") for k, m in memory.items()}
    row.extra["memory_errors"] = {k: m["error"] for k, m in memory.items() if "error" in m}
    row.notes = "peak RSS growth: " + ", ".join(
        f"{k} {m['peak_growth_mb']:.0f} MB" if "peak_growth_mb" in m else f"{k} ?"
        for k, m in memory.items()) + "; numpy: functrans's reference interpreter"
    return [row]


if __name__ == "__main__":
    print(json.dumps(memory_worker(sys.argv[1], "--quick" in sys.argv[2:])))
