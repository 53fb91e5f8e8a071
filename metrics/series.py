"""The series Dynamo's processes export that the control plane reads, by name, with where each
is written upstream. PromQL is built from them in promql.py."""

TTFT = "dynamo_frontend_time_to_first_token_seconds"
ITL = "dynamo_frontend_inter_token_latency_seconds"
REQUESTS = "dynamo_frontend_requests_total"
OUTPUT_TOKENS = "dynamo_frontend_output_tokens_total"
INPUT_TOKENS = "dynamo_frontend_input_sequence_tokens"
ACTIVE_REQUESTS = "dynamo_frontend_active_requests"
# Deprecated in favour of active_requests; 1.6.1 frontends export both, older ones only this.
INFLIGHT_REQUESTS = "dynamo_frontend_inflight_requests"
# KV-aware routing (dynamo.frontend --router-mode kv, 1.6.1): per worker the router picked, the
# prompt tokens it routed and those it found already cached there, labelled by ``phase``
# (aggregated, prefill, decode: in a disaggregated graph every request is routed twice).
ROUTER_CACHED_PREFIX = "dynamo_component_router_kv_selected_cached_prefix_tokens_total"
ROUTER_INPUT_TOKENS = "dynamo_component_router_input_sequence_tokens"
# Prompt tokens the engine reported as cached (usage.prompt_tokens_details.cached_tokens).
CACHED_TOKENS = "dynamo_frontend_cached_tokens"
# The frontend's per-worker series (lib/llm/src/http/service/metrics.rs and
# lib/llm/src/kv_router/metrics.rs at 2a6da14c; the same names in the 1.6.1 wheel): the last TTFT
# and ITL it measured per worker, written as a request to that worker gets tokens, and, with KV
# routing, each worker's active decode blocks, a series per worker its router holds, removed when
# the worker leaves (discovery/worker_monitor.rs cleanup_worker_metrics). Labels: worker_id,
# dp_rank, worker_type (prefill or decode; an aggregated worker is "decode").
WORKER_LAST_TTFT = "dynamo_frontend_worker_last_time_to_first_token_seconds"
WORKER_LAST_ITL = "dynamo_frontend_worker_last_inter_token_latency_seconds"
WORKER_KV_BLOCKS = "dynamo_frontend_worker_active_decode_blocks"
# NVIDIA dcgm-exporter, one series per GPU, labelled with the pod using it.
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"  # MiB of frame buffer in use
