-- Token ids must be i32.
local ids = input("ids", f32, { 2, 7 })
output("y", embedding(ids, param("wte"), 11, 5))
