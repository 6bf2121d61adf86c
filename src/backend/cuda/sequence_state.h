// One CUDA sequence's state (docs/cuda-backend.md, "The runtime in parts"):
// what a sequence carries from one step to the next and reset() clears. Its
// KV block table, its GDN conv and recurrent state pairs (a forward reads one
// buffer of a pair and writes the other: rollback replays from the
// untouched one) with the projection rows a rollback replays from, and the
// host mirror of its lengths. Private to the CUDA runtime (qwen35*.cpp).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "backend/cuda/device_handles.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_table.h"
#include "model/kv_pool.h"
#include "model/mtp_head.h"
#include "model/runtime.h"

namespace nextn::cuda {

struct CudaQwen35Weights;

// The group's KV pool for sequences of these weights (kernels.h, KvBlocks:
// every attention layer's keys and values, the MTP layer's last); null for
// a model without attention layers.
std::shared_ptr<KvBlockPool> make_kv_pool(const CudaQwen35Weights& w);

struct SequenceState {
  SequenceState() = default;  // holds nothing (a CudaQwen35 before its constructor fills it)
  // A KV table of up to max_tokens positions over `kv_pool`, and per GDN
  // layer (w.gdn) its state pairs (zeroed) and rows for max_rows rows
  // (projections gdn_ld wide, zeroed; conv outputs). The GDN table goes to
  // the device in upload_gdn_table.
  SequenceState(const CudaQwen35Weights& w, int max_tokens, int max_rows, int gdn_ld,
                std::shared_ptr<KvBlockPool> kv_pool);
  // Points every GDN layer's output rows (GdnLayer::y) at `y` (the
  // workspace's act rows), then copies the table to the device.
  void upload_gdn_table(const CudaQwen35Weights& w, void* y);
  // Gives the KV blocks back, zeroes on `s` every buffer the constructor
  // zeroed, in place (captured graphs keep their pointers), and clears the
  // host fields.
  void reset(cudaStream_t s);

  DeviceMemory mem;
  KvTable kv;
  void* const* d_kv_blocks = nullptr;  // kv.device(): the block table the kernels read
  // Per GDN layer: the weights' pointers (conv_w, a_log, dt_bias, norm_w)
  // and this sequence's: conv_state [2][K-1][conv_dim] fp32, S [2][Hv][dk][dv]
  // fp32, proj [max_rows][proj_ld] fp32, conv_out [max_rows][conv_dim] fp32,
  // y (the workspace's act rows).
  std::vector<GdnLayer> gdn_host;
  GdnLayer* gdn_table = nullptr;  // [GDN layers] device copy of gdn_host
  int max_rows = 0;               // rows of the GDN projection rows
  size_t gdn_conv_bytes = 0, gdn_S_bytes = 0;  // bytes of each buffer reset() zeroes

  // Host mirror.
  int length = 0;
  int forward_start = 0;  // length before the last target_forward
  int last_T = 0;         // rows of the last target_forward
  int last_chunk_T = 0;   // tokens of its last chunk (what rollback can undo)
  int parity = 0;         // GDN state buffer the next forward reads
  int mtp_length = 0;
  int mtp_last_n = 0;     // entries of the last MTP call
  // Head work of group head calls led by another sequence (or this one's
  // share of its own), added to the device counters by head_work(). Its
  // last_path, once set, is what head_work() reports: the product's group
  // calls are its only head calls.
  HeadWork head_shift;
  // What the MTP graphs ran, counted on the host as they are replayed (they
  // have no early exit: every row launched is a row run).
  MtpWork mtp_work;
};

}  // namespace nextn::cuda
