-- rope cannot turn more dims than the head has.
local x = input("x", f32, { 2, 4, 5, 8 })
output("y", rope(x, nil, { dims = 10 }))
