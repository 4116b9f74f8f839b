# The rule that builds bench/gpu_decode_lanes.c inside a generated GPT-2
# folder, beside the folder's Makefile (which it reads for OBJ, CHECK_OBJ,
# the flags and the libraries):
#   make -C F -f Makefile -f $PWD/bench/gpu_decode_lanes.mk LANES_SRC=$PWD/bench/gpu_decode_lanes.c decode_lanes
$(OBJ)/decode_lanes.o: $(LANES_SRC)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(CFLAGS) -Wall $(CPPFLAGS) -DNNC_BENCH_LIBRARY -c $< -o $@

decode_lanes: $(OBJ)/decode_lanes.o $(CHECK_OBJ) libgpt2.a
	$(NVCC) $(ARCH) -o $@ $^ $(LDLIBS)
