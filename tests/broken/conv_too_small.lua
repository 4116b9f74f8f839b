-- a 5 x 5 kernel does not fit a 4 x 4 image.
local x = input("x", f32, { 2, 3, 4, 4 })
output("y", conv2d(x, 8, 5, param("conv")))
