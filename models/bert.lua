-- A BERT encoder with mean pooling, in the configuration of
-- sentence-transformers/all-MiniLM-L6-v2. Parameter names are the keys of
-- its Hugging Face model.safetensors.

local cfg = config {
  layers = 6,
  hidden = 384,
  heads = 12,
  intermediate = 1536,
  vocab = 30522,
  positions = 512,  -- rows of the position table
  type_vocab = 2,   -- segment A / segment B
  eps = 1e-12,      -- layernorm epsilon
  batch = 32,       -- the most sentences per call
  seq = 128,        -- the longest sentence, in tokens
}

if cfg.hidden % cfg.heads ~= 0 then
  error(("heads (%d) must divide hidden (%d)"):format(cfg.heads, cfg.hidden))
end

local B = dim("B", cfg.batch)
local T = dim("T", cfg.seq)
local input_ids = input("input_ids", i32, { B, T })
local token_type_ids = input("token_type_ids", i32, { B, T })
local attention_mask = input("attention_mask", i32, { B, T })   -- 1 = token, 0 = padding

local function norm(x, p)
  return layernorm(x, p, { eps = cfg.eps })
end

local function embeddings(p)
  local words = embedding(input_ids, p.word_embeddings, cfg.vocab, cfg.hidden)
  local types = embedding(token_type_ids, p.token_type_embeddings, cfg.type_vocab, cfg.hidden)
  -- Positions 0..T-1 are the first T rows of the table, broadcast over B.
  local rows = param(p.position_embeddings.weight, { cfg.positions, cfg.hidden })
  return norm(words + slice(rows, 1, 1, T) + types, p.LayerNorm)
end

-- [B, T, hidden] -> [B, heads, T, hidden / heads] and back.
local function split_heads(x)
  return x:reshape { B, T, cfg.heads, cfg.hidden // cfg.heads }:permute { 1, 3, 2, 4 }
end

local function merge_heads(x)
  return x:permute { 1, 3, 2, 4 }:reshape { B, T, cfg.hidden }
end

-- Padded keys are masked; every query still attends to the real tokens.
local function self_attention(x, p)
  local q = split_heads(linear(x, cfg.hidden, p.query))
  local k = split_heads(linear(x, cfg.hidden, p.key))
  local v = split_heads(linear(x, cfg.hidden, p.value))
  return merge_heads(sdpa(q, k, v, { mask = attention_mask }))
end

-- Post-norm residual layer, as in the original BERT.
local function layer(x, p)
  local a = linear(self_attention(x, p.attention.self), cfg.hidden, p.attention.output.dense)
  x = norm(x + a, p.attention.output.LayerNorm)
  local h = gelu(linear(x, cfg.intermediate, p.intermediate.dense))
  return norm(x + linear(h, cfg.hidden, p.output.dense), p.output.LayerNorm)
end

local x = embeddings(param("embeddings"))
local layers = param("encoder.layer")
for i = 0, cfg.layers - 1 do
  x = layer(x, layers[i])
end
output("last_hidden_state", x)

-- Mean over the real tokens: sum(x * m) / sum(m), m the mask as [B, T, 1].
local m = cast(attention_mask, f32):reshape { B, T, 1 }
output("sentence_embedding", sum(x * m, 2) / sum(m, 2))
