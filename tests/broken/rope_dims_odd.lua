-- rope turns pairs: an odd number of rotated dims leaves one without a partner.
local x = input("x", f32, { 2, 4, 5, 8 })
output("y", rope(x, nil, { dims = 5 }))
