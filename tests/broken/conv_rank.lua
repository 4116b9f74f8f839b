-- conv2d takes an image [N, C, H, W]; a matrix is not one.
local x = input("x", f32, { 3, 20 })
output("y", conv2d(x, 8, 3, param("conv")))
