-- Includes itself until the include depth limit stops it.
include("include_recursion.lua")
output("y", relu(input("x", f32, { 3 })))
