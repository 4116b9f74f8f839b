-- conv1.weight declared [8, 3, 3, 3] first; conv2d then needs it for 4 input channels.
local x = input("x", f32, { 2, 4, 9, 9 })
local w = param("conv1.weight", { 8, 3, 3, 3 })
output("y", conv2d(x, 8, 3, param("conv1")) + w:sum())
