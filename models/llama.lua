-- LLaMA-family decoder (Hugging Face's LlamaForCausalLM): RMSNorm before
-- each sublayer, rotary position embeddings on q and k, grouped-query
-- attention (kv_heads key/value heads shared by heads / kv_heads query heads
-- each), a SwiGLU MLP, no biases. Parameter names are the keys of a
-- LlamaForCausalLM checkpoint's model.safetensors. The default config is a
-- ~125M model (d 768, 12 layers, 12 query heads over 4 kv heads); -D sets
-- any key (e.g. -D kv_heads=12 for plain multi-head attention, 1 for
-- multi-query).

local cfg = config {
  layers = 12,
  d = 768,          -- hidden_size
  heads = 12,       -- num_attention_heads
  kv_heads = 4,     -- num_key_value_heads
  ffn = 2048,       -- intermediate_size
  vocab = 32000,
  ctx = 1024,       -- the longest sequence
  batch = 8,        -- the most sequences per call
  eps = 1e-6,       -- rms_norm_eps
  theta = 10000,    -- rope_theta
  tied = false,     -- tie_word_embeddings: lm_head is embed_tokens
}

if cfg.d % cfg.heads ~= 0 then
  error(("heads (%d) must divide d (%d)"):format(cfg.heads, cfg.d))
end
if cfg.heads % cfg.kv_heads ~= 0 then
  error(("kv_heads (%d) must divide heads (%d)"):format(cfg.kv_heads, cfg.heads))
end
local hd = cfg.d // cfg.heads   -- head_dim

local B = dim("B", cfg.batch)
local T = dim("T", cfg.ctx)
local ids = input("input_ids", i32, { B, T })

-- nnc --generate: a call reads only its new tokens and attends to the keys
-- and values of the earlier ones, kept in kv_cache states; prompts of
-- different lengths are padded on the left.
local S, pos, keep
if generating then
  S = dim("S", cfg.ctx)                          -- keys after this call: cached + new
  pos = input("position_ids", i32, { B, T })
  -- 1: a token, 0: left padding; cast once, not by each attention
  keep = cast(input("attention_mask", i32, { B, S }), f32)
end

local function proj(x, n_out, p)
  return linear(x, n_out, p, { bias = false })
end

local function norm(x, p)
  return rmsnorm(x, p, { eps = cfg.eps })
end

-- [B, T, n*hd] -> [B, n, T, hd] and back.
local function split_heads(x, n)
  return x:reshape { B, T, n, hd }:permute { 1, 3, 2, 4 }
end

local function merge_heads(x)
  return x:permute { 1, 3, 2, 4 }:reshape { B, T, cfg.d }
end

local function attention(x, p, i)
  -- positions 0..T-1 (position_ids' default) are rope's time index
  local q = rope(split_heads(proj(x, cfg.heads * hd, p.q_proj), cfg.heads), pos, { base = cfg.theta })
  local k = rope(split_heads(proj(x, cfg.kv_heads * hd, p.k_proj), cfg.kv_heads), pos, { base = cfg.theta })
  local v = split_heads(proj(x, cfg.kv_heads * hd, p.v_proj), cfg.kv_heads)
  if generating then
    k = kv_cache(("cache.%d.k"):format(i), k, S)
    v = kv_cache(("cache.%d.v"):format(i), v, S)
  end
  local y = sdpa(q, k, v, { causal = true, mask = keep })
  return proj(merge_heads(y), cfg.d, p.o_proj)
end

-- SwiGLU: down(silu(gate(x)) * up(x))
local function mlp(x, p)
  return proj(silu(proj(x, cfg.ffn, p.gate_proj)) * proj(x, cfg.ffn, p.up_proj), cfg.d, p.down_proj)
end

local function block(x, p, i)
  x = x + attention(norm(x, p.input_layernorm), p.self_attn, i)
  return x + mlp(norm(x, p.post_attention_layernorm), p.mlp)
end

local model = param("model")
local embed = param("model.embed_tokens.weight", { cfg.vocab, cfg.d })
local x = embedding(ids, embed)
for i = 0, cfg.layers - 1 do
  x = block(x, model.layers[i], i)
end
-- Generating, a call returns the logits of one token a sequence, row last[b]
-- of the B*T rows (its last token): [B, vocab], not [B, T, vocab].
if generating then
  x = embedding(input("last", i32, { B }), x:reshape { B * T, cfg.d })
end
x = norm(x, model.norm)

local head = cfg.tied and embed or param("lm_head.weight", { cfg.vocab, cfg.d })
local logits = linear(x, cfg.vocab, head, { bias = false })

-- nnc --train: next-token prediction, labels[b][t] being input_ids[b][t + 1];
-- the step returns the loss only (the logits would be the largest tensor).
if training then
  output("loss", cross_entropy(logits, input("labels", i32, { B, T })))
else
  output("logits", logits)
end
