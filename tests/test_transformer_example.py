"""examples/transformer_lm.py: the quick run learns (loss well below the unigram entropy)
and prints readable text; the jitted loss equals a NumPy forward pass; gradients match
finite differences; the jitted sampling loop decodes as a Python loop does; a resumed run
ends exactly where an uninterrupted one does."""
from __future__ import annotations

import importlib.util
import math
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import functrans
import functrans.numpy as jnp
from functrans import random, tree_util
from functrans.test_util import check_grads

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "transformer_lm.py"


def _load_example():
    if str(SCRIPT.parent) not in sys.path:  # as when run as a script: its folder first
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("transformer_lm_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lm = _load_example()


# ---------------------------------------------------------------------------------------------
# A NumPy forward pass, written independently of the example's code
# ---------------------------------------------------------------------------------------------

def _np_layer_norm(p, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def _np_gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _np_forward(params, tokens, config):
    """Logits (batch, time, vocab) for token ids (batch, time), in float64."""
    b, t = tokens.shape
    d, h = config.d_model, config.num_heads
    x = params["token_embedding"][tokens] + params["position_embedding"][:t]
    for p in params["blocks"]:
        y = _np_layer_norm(p["attn_norm"], x)
        qkv = y @ p["qkv"]["w"] + p["qkv"]["b"]
        q, k, v = (qkv[..., i * d:(i + 1) * d].reshape(b, t, h, d // h) for i in range(3))
        scores = np.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(d // h)
        scores = scores + np.triu(np.full((t, t), -np.inf), 1)  # row q sees columns k <= q
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = np.einsum("bhqk,bkhe->bqhe", weights, v).reshape(b, t, d)
        x = x + attended @ p["proj"]["w"] + p["proj"]["b"]
        y = _np_layer_norm(p["mlp_norm"], x)
        x = x + _np_gelu(y @ p["fc"]["w"] + p["fc"]["b"]) @ p["fc_out"]["w"] + p["fc_out"]["b"]
    x = _np_layer_norm(params["final_norm"], x)
    head = params["token_embedding"].T if config.tie_embeddings else params["head"]
    return x @ head


def _np_loss(params, inputs, targets, config):
    logits = _np_forward(params, inputs, config)
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, targets[..., None], -1).mean()


def _random_params(config, seed, scale=0.3, dtype=np.float32):
    """The example's parameter tree with every leaf redrawn at a scale where attention,
    layer norm and GELU are far from their initial, nearly linear regime."""
    rng = np.random.default_rng(seed)

    def redraw(path, p):
        # layer-norm gains around 1, every other leaf around 0
        centre = 1.0 if tree_util.keystr(path).endswith("['scale']") else 0.0
        return jnp.asarray((centre + scale * rng.normal(size=p.shape)).astype(dtype))

    return tree_util.tree_map_with_path(redraw, lm.init_params(random.PRNGKey(seed), config))


def _tokens(config, seed, batch=3):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, config.vocab_size, (batch, config.block_size + 1)).astype(np.int32)
    return ids[:, :-1], ids[:, 1:]


# ---------------------------------------------------------------------------------------------
# Unit-level checks of the model
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tie", [True, False])
def test_jitted_loss_matches_numpy_forward(tie):
    config = lm.Config(vocab_size=11, block_size=7, d_model=8, num_heads=2, num_layers=2,
                       tie_embeddings=tie)
    params = _random_params(config, seed=1)
    inputs, targets = _tokens(config, seed=2)
    got = functrans.jit(lm.loss_fn, static_argnums=3)(params, inputs, targets, config)
    np_params = tree_util.tree_map(lambda p: np.asarray(p, np.float64), params)
    want = _np_loss(np_params, inputs, targets, config)
    assert abs(float(got) - want) <= 1e-5 * max(1.0, abs(want)), (float(got), want)
    # a loss of a random-weight model far from log(vocab) shows the comparison is not vacuous
    assert abs(want - math.log(config.vocab_size)) > 0.1


def test_attention_is_causal():
    """Changing a later token leaves every earlier position's logits unchanged."""
    config = lm.Config(vocab_size=9, block_size=6, d_model=8, num_heads=2, num_layers=1)
    params = _random_params(config, seed=3)
    forward = functrans.jit(lm.forward, static_argnums=2)
    tokens = np.array([1, 2, 3, 4, 5, 6], np.int32)
    changed = tokens.copy()
    changed[4] = 0
    a, b = np.asarray(forward(params, tokens, config)), np.asarray(forward(params, changed, config))
    np.testing.assert_array_equal(a[:4], b[:4])
    assert np.abs(a[4:] - b[4:]).max() > 1e-3


def test_loss_gradients_match_finite_differences(x64):
    config = lm.Config(vocab_size=5, block_size=4, d_model=4, num_heads=2, num_layers=1,
                       mlp_ratio=2, tie_embeddings=False)
    params = _random_params(config, seed=4, dtype=np.float64)
    inputs, targets = _tokens(config, seed=5, batch=2)
    assert tree_util.tree_leaves(params)[0].dtype == np.float64
    check_grads(lambda p: lm.loss_fn(p, inputs, targets, config), (params,), order=1,
                modes=("rev",), atol=1e-6, rtol=1e-5)
    grads = functrans.jit(functrans.grad(lm.loss_fn), static_argnums=3)(params, inputs, targets,
                                                                        config)
    # every parameter, the position rows past the used length aside, gets a gradient
    assert all(np.isfinite(np.asarray(g)).all() for g in tree_util.tree_leaves(grads))
    assert np.abs(np.asarray(grads["blocks"][0]["qkv"]["w"])).max() > 0


def test_sampler_decodes_like_a_python_loop():
    """At a tiny temperature the jitted fori_loop sampler is greedy decoding; it must agree
    with a Python loop that feeds the model the last block_size characters each step, also
    past the point where the context window starts to slide."""
    config = lm.Config(vocab_size=7, block_size=5, d_model=8, num_heads=2, num_layers=1)
    params = _random_params(config, seed=1, scale=1.0)
    length = 13
    prompt = np.array([3, 1], np.int32)
    sampler = lm.make_sampler(config, length, temperature=1e-4)
    got = np.asarray(sampler(params, random.PRNGKey(0), jnp.asarray(prompt)))
    np_params = tree_util.tree_map(lambda p: np.asarray(p, np.float64), params)
    ids = list(prompt)
    while len(ids) < length:
        window = np.array(ids[-config.block_size:])[None]
        ids.append(int(np.argmax(_np_forward(np_params, window, config)[0, -1])))
    np.testing.assert_array_equal(got, ids)
    assert len(set(ids[2:])) >= 3  # not a constant sequence that any bug would reproduce


# ---------------------------------------------------------------------------------------------
# The script
# ---------------------------------------------------------------------------------------------

def test_quick_run_beats_unigram_entropy_and_prints_text(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--ckpt-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=240, cwd=str(ROOT))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    text = out.stdout
    entropy = float(re.search(r"unigram entropy: ([0-9.]+)", text).group(1))
    final = float(re.search(r"final loss: ([0-9.]+)", text).group(1))
    logged = [float(v) for v in re.findall(r"step +\d+ +loss ([0-9.]+)", text)]
    assert len(logged) >= 5 and logged[-1] < logged[0], text
    assert final < entropy - 0.4, text
    sample = text.split("sample:\n", 1)[1].rstrip("\n")
    assert sample.startswith("Four score") and len(sample) == 240, sample
    assert set(sample) <= set(lm.TEXT), sample
    assert all(c.isprintable() or c == "\n" for c in sample), sample
    # mostly letters and spaces, as the text is: not a run of one repeated symbol
    assert sum(c.isalpha() or c == " " for c in sample) > 0.8 * len(sample), sample
    assert len(set(sample)) > 10, sample


def test_resumed_run_ends_where_an_uninterrupted_one_does(tmp_path):
    common = ["--quick", "--steps", "12", "--log-every", "4", "--sample-length", "12"]
    full = lm.main(common + ["--ckpt-dir", str(tmp_path / "a")])
    lm.main(common + ["--ckpt-dir", str(tmp_path / "b"), "--stop-after", "5"])
    resumed = lm.main(common + ["--ckpt-dir", str(tmp_path / "b"), "--resume"])
    assert resumed["loss"] == full["loss"] and resumed["sample"] == full["sample"]
    a = functrans.checkpoint.CheckpointManager(tmp_path / "a").restore(12)
    b = functrans.checkpoint.CheckpointManager(tmp_path / "b").restore(12)
    for x, y in zip(tree_util.tree_leaves(a), tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# ---------------------------------------------------------------------------------------------
# Regression: library fixes found while writing the example
# ---------------------------------------------------------------------------------------------

def test_check_grads_keeps_array_arguments_as_arrays(x64):
    """check_grads evaluated finite differences at NumPy copies of the arguments, so a
    function indexing an argument by a traced integer (an embedding lookup under vmap)
    failed with TracerArrayConversionError in the numerical pass only."""
    table = jnp.asarray(np.arange(12.0).reshape(4, 3) / 10)
    ids = jnp.asarray(np.array([[0, 2], [3, 3]], np.int32))

    def f(table):
        return jnp.sum(functrans.vmap(lambda row: jnp.sin(table[row]))(ids))

    check_grads(f, (table,), order=2)
