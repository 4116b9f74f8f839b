-- NCHW image ops with the model's own ops between them, for the layout pass
-- (compiler/passes/layout.c): a batch norm that is not folded (after a
-- relu, its per-channel factors broadcast as [C, 1, 1]), a residual add, a
-- scalar op, an NCHW feature map that leaves as an output while it also goes
-- on, and a flatten of 2 x 2 pooled features before a linear. Odd sizes.
local B = dim("B", 3)
local x = input("x", f32, { B, 3, 13, 11 })

local y = relu(conv2d(x, 6, 3, param("c1"), { padding = 1 }))
y = batchnorm(y, param("bn1"))
y = maxpool2d(y, 3, { stride = 2, padding = 1 })                 -- [B, 6, 7, 6]
local z = conv2d(y, 6, 3, param("c2"), { padding = 1, bias = false })
y = relu(batchnorm(z, param("bn2")) + y) * 0.5
output("features", y)
y = conv2d(y, 5, 1, param("c3"), { stride = 2 })                 -- [B, 5, 4, 3]
y = adaptive_avgpool2d(y, { 2, 1 })
output("logits", linear(flatten(y), 4, param("fc")))
