/* compiler/emit/emit_c_train.h — the training API of a model compiled with
 * --train, shared by the C-API targets (emit_c_train.c), and the program
 * train_<model> that drives it (emit_c_train_main.c). The graph's outputs
 * are then the loss, one gradient "grad.<weight>" per weight, and the
 * model's other outputs, kept (autodiff.c). */
#ifndef NNC_EMIT_C_TRAIN_H
#define NNC_EMIT_C_TRAIN_H

#include "emit_c.h"

/* The index of the loss among the graph's outputs (the first that is no
 * gradient), or -1. */
int ec_train_loss(const ec_ctx *x);
/* The parameter whose gradient output i is, or -1. */
int ec_train_param_of_output(const ec_ctx *x, int i);
/* Whether output i is one of the model's other outputs, and how many are. */
bool ec_train_is_kept(const ec_ctx *x, int i);
int ec_train_nkept(const ec_ctx *x);

/* The forward alone in a training schedule: in[k] (x->s->nk entries) for
 * the kernels that the loss and the kept outputs depend on, transitively;
 * returns how many, -1 out of memory. In schedule order at the whole
 * schedule's arena offsets they compute the same values as the whole
 * schedule does (a skipped kernel writes nothing any of them reads). A fused
 * kernel that also writes a backward value is among them: correct, a little
 * extra work. */
int ec_train_forward_kernels(const ec_ctx *x, bool *in);

/* The declarations of the training API, for <p>.h. */
void ec_train_decls(const ec_ctx *x, nnc_sb *b);
/* In <p>.c(u), after the model's fail() and manifest: _train_options_default,
 * _train_lr, train_table (each weight's offset in the gradient and optimizer
 * blocks), TRAIN_NUMEL, check_options() and decays(). */
nnc_status ec_train_common(const ec_ctx *x, nnc_sb *b, nnc_error *err);

/* _train_accumulate, _train_eval, _train_update, _train_step and
 * _train_steps over the target's static hooks: train_state(m) (allocates
 * the gradient and optimizer blocks), train_pass(m, d, in, dst, loss) (one
 * forward and backward, gradients into dst), train_forward_pass(m, d, in,
 * loss) (the forward alone: forward_only), train_add_part(m) (grad +=
 * part), train_sum_squares(m, &ss) (of grad) and train_apply(m, &opt,
 * scale, o) (the optimizer on every weight). */
void ec_train_shared(const ec_ctx *x, nnc_sb *b);
/* The bytes of the optimizer's two f32 moments that one rank keeps: every
 * weight's, or under ZeRO-1 one shard (1/M of them, rounded up). */
int64_t ec_train_state_bytes(const ec_ctx *x);
/* --parallel=tp:N: train_sum_squares(m, &ss) over the ranks: `squares`,
 * an expression of weight j's gradient's sum of squares (a double), summed
 * over the ranks for the sliced weights (MPI: a host all_reduce), once for
 * the whole ones; and train_sliced[NPARAMS], which are sliced. */
void ec_train_tp_norm(const ec_ctx *x, nnc_sb *b, const char *squares);
/* --parallel=tp:N, _load (emit_tp_ckpt.c): this rank's slices of a
 * checkpoint's moments into the blocks m1, m2 (train_table's layout, through
 * mom[], vel[]) and the steps taken into a new `step`, by the rank's place
 * in its tp group; fails: a failure's message set in m (else its status in
 * rc). */
void ec_tp_load_state(const ec_ctx *x, nnc_sb *b, const char *m1, const char *m2, bool fails);

/* Loss scaling (emit_c_train_scale.c): the index of the input loss_scale
 * among the graph's inputs (-1 without --train); the model struct's fields
 * (in the target's struct), the declarations (in ec_train_decls), the
 * constants and helpers (in ec_train_common: scaled_inputs(m, in), the
 * caller's inputs with loss_scale at m's scale; skip_update(m, lr),
 * scale_after_update(m, o), scale_state_of(m), set_scale_state(m, s) for
 * checkpoints) and the accessors (in ec_train_shared). The target's
 * train_state sets m->loss_scale = TRAIN_LOSS_SCALE and its passes run
 * on scaled_inputs. */
int ec_train_scale_input(const ec_ctx *x);
void ec_train_scale_struct(const ec_ctx *x, nnc_sb *b);
void ec_train_scale_decls(const ec_ctx *x, nnc_sb *b);
void ec_train_scale_common(const ec_ctx *x, nnc_sb *b);
void ec_train_scale_api(const ec_ctx *x, nnc_sb *b);

/* train_<p>.c: the program that trains the model on a token file or a
 * labelled safetensors file through the API (support/nnc_train.c), or
 * nothing when the model's inputs are neither a language model's nor a
 * classifier's; *written says which. */
nnc_status ec_write_train_main(const ec_ctx *x, const char *dir, bool *written, nnc_error *err);
/* generate_<p>.c for a model with kv caches (sets x->gen_main); nothing for others. */
nnc_status ec_write_gen_main(ec_ctx *x, const char *dir, nnc_error *err);

#endif
