-- groups must divide the input channels: 6 channels in 4 groups do not.
local x = input("x", f32, { 2, 6, 9, 9 })
output("y", conv2d(x, 8, 3, param("conv"), { groups = 4 }))
