-- GPT-2, the 124M model by default. Parameter names are the keys of Hugging
-- Face's model.safetensors for "gpt2", so the checkpoint loads as it is.

local cfg = config {
  layers = 12,
  heads = 12,
  d = 768,          -- model width
  vocab = 50257,
  ctx = 1024,       -- the longest sequence (rows of wpe)
  batch = 8,        -- the most sequences per call
  eps = 1e-5,       -- layernorm epsilon
}

if cfg.d % cfg.heads ~= 0 then
  error(("heads (%d) must divide d (%d)"):format(cfg.heads, cfg.d))
end

local B = dim("B", cfg.batch)
local T = dim("T", cfg.ctx)
local ids = input("ids", i32, { B, T })

-- nnc --generate: a call reads only its new tokens (a prompt, or one token a
-- sequence) and attends to the keys and values of the earlier ones, kept in
-- kv_cache states. Prompts of different lengths are padded on the left.
local S, pos, keep
if generating then
  S = dim("S", cfg.ctx)                  -- keys after this call: cached + new
  pos = input("pos", i32, { B, T })      -- each new token's position
  -- 1: a token, 0: left padding; cast once, not by each attention
  keep = cast(input("mask", i32, { B, S }), f32)
end

-- GPT-2's Conv1D is a linear layer whose weight is stored [in, out].
local function conv1d(x, n_out, p)
  return linear(x, n_out, p, { layout = "in_out" })
end

local function norm(x, p)
  return layernorm(x, p, { eps = cfg.eps })
end

-- [B, T, C] -> [B, heads, T, C / heads] and back.
local function split_heads(x)
  return x:reshape { B, T, cfg.heads, cfg.d // cfg.heads }:permute { 1, 3, 2, 4 }
end

local function merge_heads(x)
  return x:permute { 1, 3, 2, 4 }:reshape { B, T, cfg.d }
end

local function attention(x, p, i)
  local q, k, v = split(conv1d(x, 3 * cfg.d, p.c_attn), 3, -1)
  q, k, v = split_heads(q), split_heads(k), split_heads(v)
  if generating then
    k = kv_cache(("cache.%d.k"):format(i), k, S)
    v = kv_cache(("cache.%d.v"):format(i), v, S)
  end
  local y = sdpa(q, k, v, { causal = true, mask = keep })
  return conv1d(merge_heads(y), cfg.d, p.c_proj)
end

local function mlp(x, p)
  local h = gelu(conv1d(x, 4 * cfg.d, p.c_fc), { approx = "tanh" })
  return conv1d(h, cfg.d, p.c_proj)
end

-- Pre-norm residual block.
local function block(x, p, i)
  x = x + attention(norm(x, p.ln_1), p.attn, i)
  return x + mlp(norm(x, p.ln_2), p.mlp)
end

local wte = param("wte.weight", { cfg.vocab, cfg.d })
local wpe = param("wpe.weight", { cfg.ctx, cfg.d })

-- Token embeddings plus the first T rows of the position table, broadcast over
-- B (generating: the rows of the tokens' positions).
local x = embedding(ids, wte) + (generating and embedding(pos, wpe) or slice(wpe, 1, 1, T))

local h = param("h")
for i = 0, cfg.layers - 1 do
  x = block(x, h[i], i)
end
-- Generating, a call returns the logits of one token a sequence, row last[b]
-- of the B*T rows (its last token): [B, vocab], not [B, T, vocab].
if generating then
  x = embedding(input("last", i32, { B }), x:reshape { B * T, cfg.d })
end
x = norm(x, param("ln_f"))

-- The language-model head is tied to the token embeddings.
local logits = linear(x, cfg.vocab, wte, { bias = false })

-- nnc --train: next-token prediction, targets[b][t] being ids[b][t + 1].
-- The training step returns the loss only: B x T x vocab logits would be
-- another copy of the largest tensor of the step.
if training then
  output("loss", cross_entropy(logits, input("targets", i32, { B, T })))
else
  output("logits", logits)
end
