"""Train a small decoder-only transformer on characters, then sample from it.

    python examples/transformer_lm.py             # about 35 s on two cores
    python examples/transformer_lm.py --quick     # a smaller model, under 10 s
    python examples/transformer_lm.py --resume    # continue from the last checkpoint

The model reads windows of a public-domain text (embedded below, so nothing is downloaded):
token and learned position embeddings, pre-norm blocks of multi-head causal self-attention
and a GELU MLP with residual connections, a final layer norm, and output logits through the
token embedding (weight tying). It trains with AdamW on a warmup-cosine schedule with
global-norm gradient clipping, in one jitted step whose parameters and optimizer state are
donated. The model is written for one sequence and ``vmap``-ed over the batch.

The loss is cross-entropy in nats per character. The unigram entropy of the text (the loss
of the best model that ignores context) is printed beside it: a model that learned anything
from context ends well below it. Sampling is one jitted ``lax.fori_loop`` over positions
drawing each character with ``random.categorical``.
"""
from __future__ import annotations

import math
import os
from typing import NamedTuple

import numpy as np

import functrans as jax
import functrans.numpy as jnp
from functrans import checkpoint, lax, nn, optim, random

import training_report

# Abraham Lincoln, the Gettysburg Address (1863), in the public domain.
TEXT = """\
Four score and seven years ago our fathers brought forth on this continent, a new nation, \
conceived in Liberty, and dedicated to the proposition that all men are created equal.
Now we are engaged in a great civil war, testing whether that nation, or any nation so \
conceived and so dedicated, can long endure. We are met on a great battle-field of that war. \
We have come to dedicate a portion of that field, as a final resting place for those who here \
gave their lives that that nation might live. It is altogether fitting and proper that we \
should do this.
But, in a larger sense, we can not dedicate -- we can not consecrate -- we can not hallow -- \
this ground. The brave men, living and dead, who struggled here, have consecrated it, far \
above our poor power to add or detract. The world will little note, nor long remember what we \
say here, but it can never forget what they did here. It is for us the living, rather, to be \
dedicated here to the unfinished work which they who fought here have thus far so nobly \
advanced. It is rather for us to be here dedicated to the great task remaining before us -- \
that from these honored dead we take increased devotion to that cause for which they gave the \
last full measure of devotion -- that we here highly resolve that these dead shall not have \
died in vain -- that this nation, under God, shall have a new birth of freedom -- and that \
government of the people, by the people, for the people, shall not perish from the earth.
"""


class Config(NamedTuple):
    vocab_size: int
    block_size: int = 64   # context length in characters
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp_ratio: int = 4
    tie_embeddings: bool = True


# ---------------------------------------------------------------------------------------------
# Data: characters to integer ids
# ---------------------------------------------------------------------------------------------

class Vocabulary:
    """Every distinct character of the text, sorted, numbered from 0."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def __len__(self):
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.index[c] for c in text], np.int32)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def unigram_entropy(ids: np.ndarray, vocab_size: int) -> float:
    """Entropy (nats) of the character frequencies: the cross-entropy of the best model that
    ignores context, the baseline a language model must beat."""
    p = np.bincount(ids, minlength=vocab_size) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def get_batch(key, data, batch_size: int, block_size: int):
    """``batch_size`` random windows of ``data``: inputs and the next characters (targets)."""
    starts = random.randint(key, (batch_size,), 0, data.shape[0] - block_size)
    windows = jax.vmap(lambda s: lax.dynamic_slice(data, (s,), (block_size + 1,)))(starts)
    return windows[:, :-1], windows[:, 1:]


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

def init_params(key, config: Config):
    """A pytree of parameters: GPT-2 style init, normal(0.02), with the residual-output
    projections scaled down by ``sqrt(2 * num_layers)`` so the residual stream's variance
    does not grow with depth."""
    d, hidden = config.d_model, config.mlp_ratio * config.d_model
    keys = iter(random.split(key, 3 + 4 * config.num_layers))
    normal = nn.initializers.normal(0.02)
    out_std = 0.02 / math.sqrt(2 * config.num_layers)

    def layer_norm_params():
        return {"scale": jnp.ones((d,)), "bias": jnp.zeros((d,))}

    params = {
        "token_embedding": normal(next(keys), (config.vocab_size, d)),
        "position_embedding": normal(next(keys), (config.block_size, d)),
        "blocks": [],
        "final_norm": layer_norm_params(),
    }
    for _ in range(config.num_layers):
        params["blocks"].append({
            "attn_norm": layer_norm_params(),
            "qkv": {"w": normal(next(keys), (d, 3 * d)), "b": jnp.zeros((3 * d,))},
            "proj": {"w": out_std * random.normal(next(keys), (d, d)), "b": jnp.zeros((d,))},
            "mlp_norm": layer_norm_params(),
            "fc": {"w": normal(next(keys), (d, hidden)), "b": jnp.zeros((hidden,))},
            "fc_out": {"w": out_std * random.normal(next(keys), (hidden, d)),
                       "b": jnp.zeros((d,))},
        })
    if not config.tie_embeddings:
        params["head"] = normal(next(keys), (d, config.vocab_size))
    return params


def layer_norm(p, x, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + eps) * p["scale"] + p["bias"]


def dense(p, x):
    return x @ p["w"] + p["b"]


def causal_self_attention(p, x, num_heads: int):
    """Multi-head attention of a (time, d_model) sequence where position t sees 0..t."""
    t, d = x.shape
    head_dim = d // num_heads
    q, k, v = jnp.split(dense(p["qkv"], x), 3, axis=-1)
    # (time, d_model) -> (heads, time, head_dim)
    q, k, v = (jnp.transpose(a.reshape(t, num_heads, head_dim), (1, 0, 2)) for a in (q, k, v))
    scores = jnp.einsum("hqd,hkd->hqk", q, k) / math.sqrt(head_dim)
    causal = jnp.tril(jnp.ones((t, t), dtype=bool))
    # -inf, not a large negative number: masked positions get exactly zero weight
    scores = jnp.where(causal, scores, -jnp.inf)
    weights = nn.softmax(scores, axis=-1)
    out = jnp.einsum("hqk,hkd->hqd", weights, v)
    return dense(p["proj"], jnp.transpose(out, (1, 0, 2)).reshape(t, d))


def block(p, x, num_heads: int):
    x = x + causal_self_attention(p, layer_norm(p["attn_norm"], x), num_heads)
    hidden = nn.gelu(dense(p["fc"], layer_norm(p["mlp_norm"], x)))
    return x + dense(p["fc_out"], hidden)


def forward(params, tokens, config: Config):
    """Logits (time, vocab) for one sequence of token ids (time,), time <= block_size."""
    t = tokens.shape[0]
    x = params["token_embedding"][tokens] + params["position_embedding"][:t]
    for p in params["blocks"]:
        x = block(p, x, config.num_heads)
    x = layer_norm(params["final_norm"], x)
    head = params["token_embedding"].T if config.tie_embeddings else params["head"]
    return x @ head


def loss_fn(params, inputs, targets, config: Config):
    """Mean cross-entropy (nats per character) of next-character prediction over a batch."""
    logits = jax.vmap(lambda seq: forward(params, seq, config))(inputs)
    return optim.losses.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


# ---------------------------------------------------------------------------------------------
# Training and sampling
# ---------------------------------------------------------------------------------------------

def make_optimizer(steps: int, peak_lr: float):
    schedule = optim.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak_lr, warmup_steps=max(steps // 10, 1), decay_steps=steps,
        end_value=peak_lr / 10)
    def decay_mask(params):
        # weight decay pulls only the matrices toward 0: shrinking a bias or a layer-norm
        # gain is no regularization, it just fights the normalization
        return jax.tree_util.tree_map(lambda p: p.ndim == 2, params)

    return optim.chain(optim.clip_by_global_norm(1.0),
                       optim.adamw(schedule, b1=0.9, b2=0.99, weight_decay=0.1, mask=decay_mask))


def make_train_step(optimizer, config: Config, batch_size: int):
    # params and optimizer state are donated: the step replaces them, so their buffers can
    # be reused for the new values
    def train_step(params, opt_state, key, data):
        inputs, targets = get_batch(key, data, batch_size, config.block_size)
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets, config)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optim.apply_updates(params, updates), opt_state, loss

    return jax.jit(train_step, donate_argnums=(0, 1))


def make_sampler(config: Config, length: int, temperature: float = 0.8):
    """A jitted function ``(params, key, prompt) -> ids`` continuing ``prompt`` (shape (p,),
    1 <= p < length) to ``length`` characters."""
    window_size = min(config.block_size, length)

    @jax.jit
    def sample(params, key, prompt):
        buffer = jnp.zeros((length,), jnp.int32).at[:prompt.shape[0]].set(prompt)

        def next_char(i, state):
            buffer, key = state
            key, draw_key = random.split(key)
            # the model sees the last block_size characters; while fewer than block_size are
            # known it reads the buffer's start, and causality hides the zeros after i
            start = jnp.clip(i - window_size, 0, length - window_size)
            window = lax.dynamic_slice(buffer, (start,), (window_size,))
            logits = forward(params, window, config)[i - 1 - start]
            token = random.categorical(draw_key, logits / temperature)
            return buffer.at[i].set(token.astype(jnp.int32)), key

        buffer, _ = lax.fori_loop(prompt.shape[0], length, next_char, (buffer, key))
        return buffer

    return sample


def main(argv=None) -> dict:
    parser = training_report.argument_parser(__doc__)
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps (None: 600, or 250 with --quick)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the parameters, the batches and the sample")
    parser.add_argument("--quick", action="store_true", help="a smaller model and fewer steps")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="windows per step (None: 32, or 16 with --quick)")
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate (None: 3e-3, or 1e-2 with --quick)")
    parser.add_argument("--no-tie", action="store_true",
                        help="a separate output matrix instead of the token embedding")
    parser.add_argument("--sample-length", type=int, default=240,
                        help="characters to sample after training, the prompt included")
    parser.add_argument("--log-every", type=int, default=None,
                        help="print the mean loss every this many steps (None: a tenth of "
                             "the steps)")
    parser.add_argument("--ckpt-dir", default=os.path.join("checkpoints", "transformer_lm"),
                        help="where checkpoints are saved")
    parser.add_argument("--ckpt-every", type=int, default=100,
                        help="save a checkpoint every this many steps")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the last checkpoint in --ckpt-dir")
    parser.add_argument("--stop-after", type=int, default=None,
                        help="stop after this many steps (to try --resume)")
    training_report.add_output_flags(parser, progress=False)
    args = parser.parse_args(argv)

    vocab = Vocabulary(TEXT)
    data = jnp.asarray(vocab.encode(TEXT))
    baseline = unigram_entropy(np.asarray(data), len(vocab))
    if args.quick:
        config = Config(len(vocab), block_size=32, d_model=32, num_heads=2, num_layers=1,
                        tie_embeddings=not args.no_tie)
        steps, batch_size, lr = 250, 16, 1e-2
    else:
        config = Config(len(vocab), tie_embeddings=not args.no_tie)
        steps, batch_size, lr = 600, 32, 3e-3
    steps = args.steps if args.steps is not None else steps
    batch_size = args.batch_size or batch_size
    lr = args.lr or lr
    log_every = args.log_every or max(steps // 10, 1)

    key = random.PRNGKey(args.seed)
    key, init_key = random.split(key)
    params = init_params(init_key, config)
    optimizer = make_optimizer(steps, lr)
    opt_state = optimizer.init(params)
    num_params = sum(p.size for p in jax.tree_util.tree_leaves(params))
    print(f"text: {len(TEXT)} characters, vocabulary {len(vocab)}; model: {num_params} "
          f"parameters, {config.num_layers} layers, d_model {config.d_model}, "
          f"{config.num_heads} heads, context {config.block_size}")
    print(f"unigram entropy: {baseline:.4f} nats/char")

    manager = checkpoint.CheckpointManager(args.ckpt_dir, max_to_keep=2)
    start_step = 0
    if args.resume and manager.latest_step() is not None:
        start_step = manager.latest_step()
        state = manager.restore(start_step, target={"params": params, "opt_state": opt_state,
                                                    "key": key})
        params, opt_state, key = state["params"], state["opt_state"], state["key"]
        print(f"resumed from step {start_step}")

    train_step = make_train_step(optimizer, config, batch_size)
    recent = []
    end_step = steps if args.stop_after is None else min(steps, start_step + args.stop_after)
    # a line every --log-every steps shows the progress
    report = training_report.Report(end_step - start_step, quiet=True)
    for step in range(start_step, end_step):
        key, batch_key = random.split(key)
        params, opt_state, loss = report.timed(train_step, params, opt_state, batch_key, data)
        report.record(loss)
        recent.append(loss)
        if (step + 1) % log_every == 0 or step + 1 == end_step:
            # the mean over the last logged interval: single batches are noisy
            loss = float(np.mean([float(v) for v in recent]))
            recent = []
            print(f"step {step + 1:5d}  loss {loss:.4f}  "
                  f"({report.compile_seconds + report.run_seconds:.1f} s)")
        if (step + 1) % args.ckpt_every == 0 or step + 1 == end_step:
            manager.save(step + 1, {"params": params, "opt_state": opt_state, "key": key})

    full_loss = float(jax.jit(loss_fn, static_argnums=3)(
        params, *_all_windows(data, config.block_size), config))
    print(f"final loss: {full_loss:.4f} nats/char over the whole text "
          f"(unigram entropy {baseline:.4f})")

    key, sample_key = random.split(key)
    prompt = vocab.encode("Four score")
    sampler = make_sampler(config, args.sample_length)
    ids = sampler(params, sample_key, jnp.asarray(prompt))
    text = vocab.decode(np.asarray(ids))
    report.summary(loss_over_the_text=full_loss, unigram_entropy=baseline)
    report.plot(args.plot, title="character transformer")
    print("sample:")
    print(text)
    return {"loss": full_loss, "unigram_entropy": baseline, "sample": text}


def _all_windows(data, block_size: int):
    """Every window of the text that starts at a multiple of block_size // 2 (inputs,
    targets): an evaluation over the whole text rather than one random batch."""
    data = np.asarray(data)
    starts = np.arange(0, len(data) - block_size, block_size // 2)
    windows = np.stack([data[s:s + block_size + 1] for s in starts])
    return jnp.asarray(windows[:, :-1]), jnp.asarray(windows[:, 1:])


if __name__ == "__main__":
    main()
