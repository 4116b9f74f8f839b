-- a pool pads at most half its kernel (PyTorch's rule).
local x = input("x", f32, { 2, 3, 9, 9 })
output("y", maxpool2d(x, 2, { padding = 2 }))
