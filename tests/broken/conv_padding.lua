-- padding as wide as the kernel only adds windows of zeros.
local x = input("x", f32, { 2, 3, 9, 9 })
output("y", conv2d(x, 8, 3, param("conv"), { padding = 3 }))
