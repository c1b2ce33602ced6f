"""The built-in models' parameters as common/model_layout.cc lays them out (the GPT's and the
LLaMA's), written independently of the C++ for the Python tools (bench/frontier.py's payload
sizes, deploy/wan/run.py's link rates, tests/integration/peer.py's payloads): one (rows,
numel, is_vector) per tensor, in layout order."""


def tensor_shapes(vocab=256, n_layer=1, d_model=32, context=32):
    d = d_model
    shapes = [(vocab, vocab * d, False), (context, context * d, False)]  # token and position embeddings
    for _ in range(n_layer):  # ln1 gain, bias; qkv; proj; ln2 gain, bias; fc; fc2
        shapes += [(d, d, True), (d, d, True), (3 * d, 3 * d * d, False), (d, d * d, False),
                   (d, d, True), (d, d, True), (4 * d, 4 * d * d, False), (d, 4 * d * d, False)]
    return shapes + [(d, d, True), (d, d, True), (vocab, vocab * d, False)]  # final norm, head


def param_count(vocab=256, n_layer=1, d_model=32, context=32):
    return sum(numel for _, numel, _ in tensor_shapes(vocab, n_layer, d_model, context))


def llama_shapes(vocab, n_layer, d_model, n_head, n_kv_head, ffn_dim, tied=False):
    """LlamaLayout: embedding; per layer input norm, q, k, v, o, post-attention norm, gate, up,
    down; final norm; the head unless tied. k and v have n_kv_head heads of d_model / n_head."""
    d, kv, f = d_model, n_kv_head * (d_model // n_head), ffn_dim
    shapes = [(vocab, vocab * d, False)]
    for _ in range(n_layer):
        shapes += [(d, d, True), (d, d * d, False), (kv, kv * d, False), (kv, kv * d, False), (d, d * d, False),
                   (d, d, True), (f, f * d, False), (f, f * d, False), (d, d * f, False)]
    return shapes + [(d, d, True)] + ([] if tied else [(vocab, vocab * d, False)])
