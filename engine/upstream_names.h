// Attribute names upstream DeepSpeed ZeRO-3 writes onto users' objects (see docs/DESIGN.md).
//
// One table, used by the legacy modes (which write them), the harness's collision dictionary
// (which makes users own them) and the fuzz dictionary generated from it.
#pragma once

// X(name): names written on modules. `id` is 0.15.4's, `ds_id` the later rename.
#define ZERO3_UPSTREAM_MODULE_NAMES(X)                                                       \
  X("id") X("ds_id") X("ds_grads_remaining") X("pre_bwd_fn") X("post_bwd_fn")                \
  X("applied_pre_backward_ref_cnt") X("ds_recompute_parameters") X("_external_params")       \
  X("_original_parameters") X("_z3_leaf") X("ds_model_granularity")                          \
  X("ds_inflight_param_registry")

// X(name): names written on parameters.
#define ZERO3_UPSTREAM_PARAM_NAMES(X)                                                        \
  X("ds_id") X("ds_status") X("ds_shape") X("ds_numel") X("ds_numel_aligned") X("ds_tensor") \
  X("ds_param_type") X("ds_active_sub_modules") X("ds_persist") X("is_external_param")       \
  X("ds_process_group") X("ds_zero_partition_rank") X("ds_secondary_tensor") X("all_gather") \
  X("partition") X("partition_numel") X("padding_size") X("aligned_size") X("ds_summary")
