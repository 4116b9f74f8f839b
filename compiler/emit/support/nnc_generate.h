/* support/nnc_generate.h — the generation program every generate_<model>
 * runs (nnc --generate): prompts in, tokens out. It drives the model's C
 * API through the benchmark's description of the model (nnc_bench.h): a
 * prefill call reads the prompts (padded on the left to one length) and
 * fills the kv caches, then a decode call a step reads one new token a
 * sequence and appends to the caches. The model must read inputs ids and
 * pos [B, T] and mask [B, S] (Hugging Face's input_ids, position_ids and
 * attention_mask too), and write logits [B, T, V]; or, given an input last
 * [B] (each sequence's last token among the B*T rows), logits [B, V]. */
#ifndef NNC_GENERATE_H
#define NNC_GENERATE_H

#include "nnc_bench.h"

int nnc_generate_main(const nnc_bench_model *md, int argc, char **argv);

#endif
