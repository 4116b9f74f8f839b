-- Sequence classification with a GRU: token embeddings, a bidirectional
-- 2-layer GRU (torch.nn.GRU's parameter names under "gru": gru.weight_ih_l0
-- [3*hidden, embed], gru.weight_hh_l0_reverse, ...), the mean of its outputs
-- over time, a linear layer to the classes. -D sizes shrink it for tests.

local cfg = config {
  batch = 32,       -- the most sequences per call
  seq = 64,         -- the most tokens per sequence
  vocab = 1000,
  embed = 64,
  hidden = 96,
  layers = 2,
  classes = 5,
}

local B = dim("B", cfg.batch)
local T = dim("T", cfg.seq)
local ids = input("ids", i32, { B, T })

local x = embedding(ids, param("embed"), cfg.vocab, cfg.embed)
local y = gru(x, cfg.hidden, param("gru"), { layers = cfg.layers, bidirectional = true, batch_first = true })
local logits = linear(mean(y, 2), cfg.classes, param("fc"))
output("logits", logits)

-- nnc --train: the loss to minimise, against each sequence's class
if training then
  output("loss", cross_entropy(logits, input("labels", i32, { B })))
end
