#!/usr/bin/env python3
"""Measure the forward-pass time of a decoder-only transformer with random weights on one GPU.

The model is built from its shape alone (hidden size, layers, heads, KV heads, head size, MLP
size, vocabulary), so no checkpoint and no inference engine are needed: the numbers are what
the GPU does for one engine iteration, without scheduling, sampling or Python between
iterations. The default shape is Llama-3-8B's (meta-llama/Meta-Llama-3-8B config.json);
--model-name llama-3-70b picks Llama-3-70B's, and --tp N the shard one GPU of an N-GPU
tensor-parallel group holds (without the group's all-reduces).

Two phases are swept, each captured as a CUDA graph and replayed, as vLLM runs its iterations:

  decode   B sequences each produce one token, attending over C cached tokens (a KV cache of
           C tokens per sequence, filled with random values).
  prefill  one sequence of C new tokens from an empty cache, causal attention; the LM head
           runs for its last token only.

The pieces of each layer between its attentions are compiled with torch.compile (fusing the
norms, rotary embedding and SiLU-and-multiply, as vLLM's kernels do), unless --compile off.

Output: one CSV row per (phase, B, C) with the median time over the repeats, in the format
`mosaic calibrate --forward FILE --gpu NAME` reads:

  gpu,model,dtype,phase,batch_size,context_len,time_ms,time_ms_std,repeats,cuda_graph,
  torch_version,device_name,attention,compiled,tp

Attention uses flash-attn's flash_attn_with_kvcache / flash_attn_func when the flash-attn
package is installed (the kernels vLLM uses on NVIDIA GPUs), else PyTorch's fused
scaled_dot_product_attention backends when one takes the grouped-query decode shape (with
enable_gqa on PyTorch >= 2.5; before that the KV heads are repeated, which over-counts KV
traffic for grouped-query models), else grouped matrix products.

Configurations whose KV cache and activations do not fit the GPU are skipped with a message.

Example (one GPU):

  python3 tools/profile_forward.py --gpu-name H100-80GB -o h100_llama-3-8b.csv
  mosaic calibrate --forward h100_llama-3-8b.csv --gpu H100-80GB

A CPU smoke test of the script itself (tiny shapes, no CUDA graphs, meaningless times):

  python3 tools/profile_forward.py --device cpu --tiny -o /tmp/tiny.csv
"""

import argparse
import csv
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

try:  # optional: the kernels vLLM uses
    from flash_attn import flash_attn_func, flash_attn_with_kvcache  # type: ignore
except Exception:  # pragma: no cover - depends on the machine
    flash_attn_func = None
    flash_attn_with_kvcache = None

# meta-llama/Meta-Llama-3-8B and Meta-Llama-3-70B config.json, by their catalog names.
LLAMA3_8B = dict(hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, intermediate=14336, vocab=128256)
SHAPES = {
    "llama-3-8b": LLAMA3_8B,
    "llama-3-70b": dict(hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128, intermediate=28672, vocab=128256),
}
TINY = dict(hidden=256, layers=2, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000)

DEFAULT_BATCHES = [1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256]
DEFAULT_CONTEXTS = [128, 256, 512, 1024, 2048, 4096]
DEFAULT_PREFILL_TOKENS = [128, 256, 512, 1024, 2048, 4096, 8192]


def parse_ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


class Shape:
    def __init__(self, d):
        self.__dict__.update(d)
        if self.heads % self.kv_heads:
            raise SystemExit(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    def weight_bytes(self, dtype_bytes):
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return (self.layers * (q + kv + o + mlp) + 2 * self.vocab * self.hidden) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes):
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    def shard(self, tp):
        """The shape one GPU of a tensor-parallel group of tp GPUs holds, as vLLM shards it:
        attention heads, MLP and vocabulary (embedding and LM head) split tp ways, KV heads
        too, or replicated when tp exceeds them."""
        if tp == 1:
            return self
        if self.heads % tp or self.intermediate % tp or (self.kv_heads % tp and tp % self.kv_heads):
            raise SystemExit(f"--tp {tp} must divide the heads ({self.heads}) and the MLP size ({self.intermediate}), "
                             f"and divide or be divided by the KV heads ({self.kv_heads})")
        d = dict(self.__dict__)
        d.update(heads=self.heads // tp, kv_heads=max(self.kv_heads // tp, 1), intermediate=self.intermediate // tp,
                 vocab=-(-self.vocab // tp))
        return Shape(d)


# PyTorch's fused attention backends, most preferred first; the math backend (which
# materialises the scores and repeats the KV heads) is left out for decode.
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    FUSED_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
except Exception:  # pragma: no cover - PyTorch < 2.3
    SDPBackend = sdpa_kernel = None
    FUSED_BACKENDS = []


def sdpa(q, k, v, causal, rep, allow_math=False, backends=None):
    """scaled_dot_product_attention over [B, heads, T, D] tensors with rep query heads per KV
    head, restricted to the fused backends (and math when allow_math)."""
    def call():
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=rep > 1)
        except TypeError:  # PyTorch < 2.5: no enable_gqa, repeat the KV heads
            kr, vr = (k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)) if rep > 1 else (k, v)
            return F.scaled_dot_product_attention(q, kr, vr, is_causal=causal)
    if sdpa_kernel is None:
        return call()
    with sdpa_kernel(list(backends or FUSED_BACKENDS) + ([SDPBackend.MATH] if allow_math else [])):
        return call()


def probe_attention(s, device, dtype):
    """Which attention implementation decode runs on: flash-attn's kernels when the package is
    installed, else PyTorch's fused SDPA if one of its fused backends accepts a grouped-query
    decode shape, else the grouped matrix products. Prints what each fused backend does."""
    if device.type != "cuda":
        return "grouped"
    if flash_attn_with_kvcache is not None:
        return "flash-attn"
    rep = s.heads // s.kv_heads
    q = torch.randn(4, s.heads, 1, s.head_dim, device=device, dtype=dtype)
    k = torch.randn(4, s.kv_heads, 512, s.head_dim, device=device, dtype=dtype)
    ok = []
    for be in FUSED_BACKENDS:
        try:
            sdpa(q, k, k, False, rep, backends=[be])
            torch.cuda.synchronize()
            ok.append(be)
            print(f"attention probe: SDPA backend {be.name} takes the decode shape", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - any refusal means "not this backend"
            print(f"attention probe: SDPA backend {be.name} refused: {str(e).splitlines()[0][:160]}", file=sys.stderr)
    return "sdpa" if ok else "grouped"


class Model(torch.nn.Module):
    """A Llama-style decoder: RMSNorm, fused QKV with rotary embeddings, GQA attention, gated
    SiLU MLP (fused gate/up), residuals, final norm and LM head. Weights are random."""

    def __init__(self, s, device, dtype, attention):
        super().__init__()
        self.s = s
        self.attention_impl = attention
        # Random weights drawn on the device itself: drawing 8B values on the CPU takes minutes.
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape):
            t = torch.randn(*shape, generator=g, device=device, dtype=dtype)
            return torch.nn.Parameter(t.mul_(0.02), requires_grad=False)

        qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
        self.embed = w(s.vocab, s.hidden)
        self.qkv = torch.nn.ParameterList([w(qkv, s.hidden) for _ in range(s.layers)])
        self.o = torch.nn.ParameterList([w(s.hidden, s.heads * s.head_dim) for _ in range(s.layers)])
        self.gate_up = torch.nn.ParameterList([w(2 * s.intermediate, s.hidden) for _ in range(s.layers)])
        self.down = torch.nn.ParameterList([w(s.hidden, s.intermediate) for _ in range(s.layers)])
        self.norm = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.ones(s.hidden, device=device, dtype=dtype), requires_grad=False)
             for _ in range(2 * s.layers + 1)])
        self.lm_head = w(s.vocab, s.hidden)
        inv = 1.0 / (500000.0 ** (torch.arange(0, s.head_dim, 2, dtype=torch.float32) / s.head_dim))
        self.register_buffer("inv_freq", inv.to(device), persistent=False)
        self.use_pieces(False)

    def rope_tables(self, pos):
        """cos and sin of the rotary angles for flat positions [N], each [N, head_dim/2]."""
        f = pos.float()[:, None] * self.inv_freq
        return f.cos().to(self.embed.dtype), f.sin().to(self.embed.dtype)

    def attention(self, q, k, v, cache, cache_len, cache_pos):
        """q: [B, T, H, D]; k, v: [B, T, KVH, D]. With a cache (decode, T = 1), k and v are written
        at position cache_pos (a Python int, so that nothing synchronises inside a CUDA graph;
        cache_len holds the same position per sequence for flash-attn) and attention covers
        cache_pos + 1 tokens. The cache is [B, C, KVH, D] for flash-attn and [B, KVH, C, D]
        otherwise (see cache_layout)."""
        s, impl = self.s, self.attention_impl
        rep = s.heads // s.kv_heads
        b = q.shape[0]
        if cache is not None:
            kc, vc = cache
            if impl == "flash-attn":
                return flash_attn_with_kvcache(q, kc, vc, k=k, v=v, cache_seqlens=cache_len, causal=True)
            kc[:, :, cache_pos:cache_pos + 1] = k.transpose(1, 2)
            vc[:, :, cache_pos:cache_pos + 1] = v.transpose(1, 2)
            keys, vals = kc[:, :, :cache_pos + 1], vc[:, :, :cache_pos + 1]
            if impl == "grouped":
                # One query token per sequence: the rep query heads of a KV head form the rows of
                # one small matrix product, so each KV head's cache is read once (as paged
                # decode kernels do), with no repeated heads and no score mask.
                qg = q.reshape(b, s.kv_heads, rep, s.head_dim)
                scores = torch.matmul(qg, keys.transpose(-1, -2)).float() * (1.0 / math.sqrt(s.head_dim))
                out = torch.matmul(scores.softmax(-1).to(q.dtype), vals)  # [B, KVH, rep, D]
                return out.reshape(b, 1, s.heads, s.head_dim)
            return sdpa(q.transpose(1, 2), keys, vals, False, rep).transpose(1, 2)
        if impl == "flash-attn":
            return flash_attn_func(q, k, v, causal=True)
        return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), True, rep, allow_math=True).transpose(1, 2)

    def cache_layout(self, b, c, device, dtype):
        """Random KV cache tensors of c tokens per sequence for one layer."""
        s = self.s
        shape = (b, c, s.kv_heads, s.head_dim) if self.attention_impl == "flash-attn" else (b, s.kv_heads, c, s.head_dim)
        return (torch.randn(*shape, device=device, dtype=dtype), torch.randn(*shape, device=device, dtype=dtype))

    def forward(self, tokens, pos, caches=None, cache_len=None, cache_pos=0, last_only=False):
        """tokens, pos: [B, T]. Tokens are flattened to [N = B*T, hidden] between attentions, as
        engines run them."""
        s = self.s
        b, t = tokens.shape
        hd = s.heads * s.head_dim
        x = self.embed[tokens.reshape(-1)]
        cos, sin = self.rope_tables(pos.reshape(-1))
        for i in range(s.layers):
            q, k, v = self.pre(x, self.norm[2 * i], self.qkv[i], cos, sin)
            a = self.attention(q.view(b, t, s.heads, s.head_dim), k.view(b, t, s.kv_heads, s.head_dim),
                               v.view(b, t, s.kv_heads, s.head_dim), None if caches is None else caches[i],
                               cache_len, cache_pos)
            x = self.post(x, a.reshape(b * t, hd), self.o[i], self.norm[2 * i + 1], self.gate_up[i], self.down[i])
        if last_only:
            x = x.view(b, t, s.hidden)[:, -1]
        return rms_norm(x, self.norm[-1]) @ self.lm_head.t()

    def use_pieces(self, compiled):
        """Run the pieces between attentions compiled with torch.compile (fusing the norms,
        rotary embedding and SiLU-and-multiply into a few kernels, as vLLM's custom kernels and
        its torch.compile pass do) or eagerly (one PyTorch kernel per elementwise operation)."""
        pre, post = make_pieces(self.s)
        if compiled:
            pre = torch.compile(pre, dynamic=True, fullgraph=True)
            post = torch.compile(post, dynamic=True, fullgraph=True)
        self.pre, self.post = pre, post


def rms_norm(x, weight, eps=1e-5):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * weight


def make_pieces(s):
    """The two pieces of a layer between its attentions, over flat tokens x: [N, hidden].

    pre:  RMSNorm, fused QKV projection, rotary embedding (rotate-half form, as in the Llama
          models' Hugging Face code) -> q [N, H, D], k and v [N, KVH, D]
    post: output projection and residual, RMSNorm, fused gate/up projection, SiLU-and-multiply,
          down projection and residual -> x [N, hidden]"""
    hd, kvd, half = s.heads * s.head_dim, s.kv_heads * s.head_dim, s.head_dim // 2

    def rope(x, cos, sin):
        c, sn = cos[:, None, :], sin[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)

    def pre(x, norm_w, qkv_w, cos, sin):
        qkv = rms_norm(x, norm_w) @ qkv_w.t()
        q, k, v = qkv.split([hd, kvd, kvd], dim=-1)
        q = rope(q.reshape(-1, s.heads, s.head_dim), cos, sin)
        k = rope(k.reshape(-1, s.kv_heads, s.head_dim), cos, sin)
        return q, k, v.reshape(-1, s.kv_heads, s.head_dim)

    def post(x, a, o_w, norm_w, gate_up_w, down_w):
        x = x + a @ o_w.t()
        gate, up = (rms_norm(x, norm_w) @ gate_up_w.t()).chunk(2, dim=-1)
        return x + (F.silu(gate) * up) @ down_w.t()

    return pre, post


def capture(step):
    """step captured as a CUDA graph (after one run on a side stream, as PyTorch requires), and
    replayed once."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    return graph


def timed(fn, device, repeats, inner):
    """Median and standard deviation of fn's time in milliseconds, over repeats blocks of inner
    calls each."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            times.append((time.perf_counter() - t0) * 1e3 / inner)
    return statistics.median(times), (statistics.stdev(times) if len(times) > 1 else 0.0)


def try_compile(model, device):
    """Compile the model's pieces and run them once on each kind of shape the sweep uses (one
    token, a few decode tokens, a prefill), so that compiling happens here and never inside a
    CUDA graph capture. On any failure, print it and go back to eager pieces."""
    try:
        import torch._dynamo as dynamo
        for knob in ("cache_size_limit", "recompile_limit"):
            if hasattr(dynamo.config, knob):
                setattr(dynamo.config, knob, max(getattr(dynamo.config, knob), 64))
    except Exception:  # noqa: BLE001 - an older or newer PyTorch without this knob
        pass
    t0 = time.perf_counter()
    try:
        model.use_pieces(True)
        s = model.s
        for b, c in ((1, 16), (2, 16), (3, 32)):
            caches = [model.cache_layout(b, c + 1, device, model.embed.dtype) for _ in range(s.layers)]
            tokens = torch.zeros((b, 1), dtype=torch.int64, device=device)
            pos = torch.full((b, 1), c, dtype=torch.int64, device=device)
            model(tokens, pos, caches, torch.full((b,), c, dtype=torch.int32, device=device), cache_pos=c)
        for t in (16, 48):
            model(torch.zeros((1, t), dtype=torch.int64, device=device), torch.arange(t, device=device)[None, :],
                  last_only=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any failure means "run eagerly"
        print(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:200]}); running eagerly",
              file=sys.stderr)
        model.use_pieces(False)
        return False
    if device.type == "cuda":
        torch.cuda.empty_cache()
    print(f"compiled the layer pieces in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return True


def free_bytes(device):
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free
    return 1 << 62


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="CSV file to write")
    ap.add_argument("--gpu-name", default="", help="catalog name of the GPU (recorded in the CSV), e.g. H100-80GB")
    ap.add_argument("--model-name", default=None,
                    help="catalog name of the model (recorded in the CSV); picks its shape when known (" +
                         ", ".join(SHAPES) + "; others start from Llama-3-8B's and take the shape flags). "
                         "Default: llama-3-8b, or 'custom' when shape flags are given")
    ap.add_argument("--tp", type=int, default=1,
                    help="measure the shard one GPU of a tensor-parallel group of this many GPUs holds (heads, KV "
                         "heads, MLP and vocabulary split tp ways); the group's all-reduces are not run. Recorded per row")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    ap.add_argument("--tiny", action="store_true", help="a tiny shape, for a smoke test of the script")
    for k, v in LLAMA3_8B.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=None,
                        help=f"model shape, before --tp shards it (Llama-3-8B: {v})")
    ap.add_argument("--batches", type=parse_ints, default=DEFAULT_BATCHES, help="decode batch sizes (comma-separated)")
    ap.add_argument("--contexts", type=parse_ints, default=DEFAULT_CONTEXTS, help="decode context lengths (comma-separated)")
    ap.add_argument("--prefill-tokens", type=parse_ints, default=DEFAULT_PREFILL_TOKENS,
                    help="prefill sizes in tokens: one sequence of each (comma-separated)")
    ap.add_argument("--no-graphs", action="store_true", help="run decode and prefill eagerly instead of as CUDA graphs")
    ap.add_argument("--attention", default="auto", choices=["auto", "flash-attn", "sdpa", "grouped"],
                    help="attention implementation (auto: flash-attn if installed, else a fused SDPA backend that "
                         "takes grouped-query decode, else grouped matrix products); recorded per row")
    ap.add_argument("--compile", default="auto", choices=["auto", "on", "off"],
                    help="compile the pieces between attentions with torch.compile (auto: on CUDA); falls back "
                         "to eager with a message if compiling fails; recorded per row")
    ap.add_argument("--repeats", type=int, default=10, help="timed blocks per configuration")
    ap.add_argument("--inner", type=int, default=10, help="forward passes per timed block")
    ap.add_argument("--memory-fraction", type=float, default=0.9, help="use at most this fraction of free memory")
    args = ap.parse_args()

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    dtype_bytes = torch.finfo(dtype).bits // 8
    shape_flags = [k for k in LLAMA3_8B if getattr(args, k) is not None]
    if args.model_name is None:
        args.model_name = "custom" if shape_flags or args.tiny else "llama-3-8b"
    elif args.model_name in SHAPES and shape_flags:
        print(f"note: the shape flags change {args.model_name}'s shape, but the rows will name {args.model_name}",
              file=sys.stderr)
    if args.tiny:
        shape = dict(TINY)
    else:  # a known shape, else Llama-3-8B's; the shape flags change it
        shape = dict(SHAPES.get(args.model_name, LLAMA3_8B))
    for k in LLAMA3_8B:
        v = getattr(args, k)
        if v is not None:
            shape[k] = v
    if args.tp < 1:
        raise SystemExit(f"--tp must be positive, got {args.tp}")
    s = Shape(shape).shard(args.tp)
    shape = dict(s.__dict__)
    if args.tiny:
        args.batches = [b for b in args.batches if b <= 8] or [1]
        args.contexts = [c for c in args.contexts if c <= 256] or [128]
        args.prefill_tokens = [t for t in args.prefill_tokens if t <= 256] or [128]
        args.repeats, args.inner = min(args.repeats, 2), min(args.inner, 2)
    graphs = device.type == "cuda" and not args.no_graphs
    torch.set_grad_enabled(False)

    print(f"building a random-weight model: {shape} ({s.weight_bytes(dtype_bytes) / 2**30:.1f} GiB) on {device}", file=sys.stderr)
    attention = probe_attention(s, device, dtype) if args.attention == "auto" else args.attention
    if attention == "flash-attn" and flash_attn_with_kvcache is None:
        raise SystemExit("--attention flash-attn: the flash-attn package is not installed")
    print(f"attention: {attention}", file=sys.stderr)
    model = Model(s, device, dtype, attention)
    compiled = args.compile == "on" or (args.compile == "auto" and device.type == "cuda")
    if compiled:
        compiled = try_compile(model, device)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    budget = free_bytes(device) * args.memory_fraction
    kvb = s.kv_bytes_per_token(dtype_bytes)

    out = open(args.output, "w", newline="")
    w = csv.writer(out)
    w.writerow(["gpu", "model", "dtype", "phase", "batch_size", "context_len", "time_ms", "time_ms_std", "repeats",
                "cuda_graph", "torch_version", "device_name", "attention", "compiled", "tp"])

    def row(phase, b, c, ms, std, repeats, graph):
        w.writerow([args.gpu_name, args.model_name, args.dtype, phase, b, c, f"{ms:.4f}", f"{std:.4f}",
                    repeats, int(graph), torch.__version__, device_name, attention, int(compiled), args.tp])
        out.flush()
        print(f"{phase:8s} B={b:4d} C={c:5d}: {ms:9.3f} ms", file=sys.stderr)

    # Prefill: one sequence of T tokens, causal, logits of the last token only.
    for t in args.prefill_tokens:
        need = t * (6 * s.hidden + 3 * s.intermediate) * dtype_bytes * 2 + t * s.heads * dtype_bytes * 4
        if need > budget:
            print(f"skip prefill T={t}: needs {need / 2**30:.1f} GiB", file=sys.stderr)
            continue
        tokens = torch.randint(0, s.vocab, (1, t), device=device)
        pos = torch.arange(t, device=device)[None, :]

        def prefill():
            return model(tokens, pos, last_only=True)

        for _ in range(2):
            prefill()
        graph = capture(prefill) if graphs else None
        repeats = max(3, args.repeats // 2)
        ms, std = timed(graph.replay if graphs else prefill, device, repeats, max(1, args.inner // 5))
        row("prefill", 1, t, ms, std, repeats, graphs)
        del graph
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # Decode: a KV cache of C+1 tokens per sequence and layer, one new token per sequence.
    for c in args.contexts:
        for b in args.batches:
            need = b * (c + 1) * kvb + b * (4 * s.hidden + 2 * s.intermediate + s.vocab) * dtype_bytes * 2
            if need > budget:
                print(f"skip decode B={b} C={c}: needs {need / 2**30:.1f} GiB, {budget / 2**30:.1f} GiB free", file=sys.stderr)
                continue
            caches = [model.cache_layout(b, c + 1, device, dtype) for _ in range(s.layers)]
            tokens = torch.randint(0, s.vocab, (b, 1), device=device)
            pos = torch.full((b, 1), c, device=device, dtype=torch.int64)
            cache_len = torch.full((b,), c, device=device, dtype=torch.int32)

            def step():
                return model(tokens, pos, caches, cache_len, cache_pos=c)

            for _ in range(3):  # warm up (and let cuBLAS pick its kernels)
                step()
            graph = capture(step) if graphs else None
            fn = graph.replay if graphs else step
            ms, std = timed(fn, device, args.repeats, args.inner)
            row("decode", b, c, ms, std, args.repeats, graphs)
            del caches, fn, step, graph
            if device.type == "cuda":
                torch.cuda.empty_cache()

    out.close()
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
