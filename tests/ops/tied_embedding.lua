-- Tied embeddings (GPT-2's wte): a table read by the lookup and, as B
-- transposed, by the head's GEMM. A C SIMD folder holds wte packed for the
-- GEMM only, and the lookup reads its rows out of the panels (its vocabulary
-- past a multiple of the GEMM's NR, its width past twice KC). `other` is
-- read by an elementwise op too, so it keeps its values and the GEMM reads a
-- packed copy.
local B = dim("B", 4)
local T = dim("T", 9)
local ids = input("ids", i32, { B, T })
local wte = param("wte", { 69, 300 })
output("logits", linear(embedding(ids, wte), 69, wte, { bias = false }))
local near = input("near", i32, { B, T })
local other = param("other", { 37, 20 })
output("other_logits", linear(embedding(near, other), 37, other, { bias = false }))
output("other_doubled", other * 2)
