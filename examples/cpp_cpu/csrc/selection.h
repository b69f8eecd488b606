// Selection: row_top_k (any dim, floats and integers) and moe_gating (softmax, top-k, renormalise).
#pragma once

#include <tuple>

#include "common.h"

namespace {

// The ranking key: float for Half/BFloat16 (exact), the type itself otherwise.
template <typename T>
using Key = std::conditional_t<kReduced<T>, float, T>;

template <typename K>
struct Entry {
  K key;
  int64_t index;
};

// Descending, NaN above everything (torch.topk's order); ties by position so the order is total.
template <typename K>
inline bool ranks_before(const Entry<K>& a, const Entry<K>& b) {
  if constexpr (std::is_floating_point_v<K>) {
    const bool a_nan = std::isnan(a.key), b_nan = std::isnan(b.key);
    if (a_nan != b_nan) return a_nan;
    if (!a_nan && a.key != b.key) return a.key > b.key;
  } else {
    if (a.key != b.key) return a.key > b.key;
  }
  return a.index < b.index;
}

// Puts the k best of entries[0, n) first, in rank order.
template <typename K>
void select_top(std::vector<Entry<K>>& entries, int64_t n, int64_t k) {
  const auto cmp = [](const Entry<K>& a, const Entry<K>& b) { return ranks_before(a, b); };
  if (k * 4 < n) {
    std::partial_sort(entries.begin(), entries.begin() + k, entries.begin() + n, cmp);
  } else {
    std::sort(entries.begin(), entries.begin() + n, cmp);
  }
}

// ---- row_top_k ------------------------------------------------------------------------------------

template <typename T>
void top_k_kernel(const T* x, T* values, int64_t* indices, const Split& s, int64_t k) {
  using K = Key<T>;
  const int64_t lines = s.outer * s.inner;
  at::parallel_for(0, lines, row_grain(s.n), [&](int64_t begin, int64_t end) {
    std::vector<Entry<K>> entries(static_cast<size_t>(s.n));
    for (int64_t line = begin; line < end; ++line) {
      const int64_t o = line / s.inner;
      const int64_t i = line % s.inner;
      const T* src = x + o * s.n * s.inner + i;
      for (int64_t j = 0; j < s.n; ++j) entries[j] = Entry<K>{static_cast<K>(src[j * s.inner]), j};
      select_top(entries, s.n, k);
      T* v_out = values + o * k * s.inner + i;
      int64_t* i_out = indices + o * k * s.inner + i;
      for (int64_t r = 0; r < k; ++r) {
        v_out[r * s.inner] = src[entries[r].index * s.inner];  // the input element itself, bit for bit
        i_out[r * s.inner] = entries[r].index;
      }
    }
  });
}

std::tuple<Tensor, Tensor> row_top_k(const Tensor& x_in, int64_t k, int64_t dim) {
  check_input(x_in, "row_top_k", "x");
  const Tensor x = x_in.contiguous();
  const int64_t d = wrap_dim(dim, x.dim(), "row_top_k");
  const Split s = split_at(x, d);
  TORCH_CHECK(k >= 0 && k <= s.n, "cann_bench::row_top_k: k = ", k, " is outside [0, ", s.n, "] (size of dim ", d,
              ")");
  std::vector<int64_t> out_sizes(x.sizes().begin(), x.sizes().end());
  if (x.dim() > 0) out_sizes[d] = k;
  Tensor values = at::empty(out_sizes, x.options());
  Tensor indices = at::empty(out_sizes, x.options().dtype(at::kLong));
  if (values.numel() == 0) return std::make_tuple(values, indices);
  visit_sortable(x.scalar_type(), "row_top_k", [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel(x.data_ptr<T>(), values.data_ptr<T>(), indices.data_ptr<int64_t>(), s, k);
  });
  return std::make_tuple(values, indices);
}

// ---- moe_gating -----------------------------------------------------------------------------------
// softmax is strictly increasing, so the k largest p are the k largest logits, and two p are equal exactly
// when their logits are: experts are ranked on the input values themselves (NaN first, as a descending sort
// puts it; equal values keep the lower expert first). The softmax denominator cancels in the renormalisation:
// weights = e_i / sum(e_top) with e = exp(x - max), so only the k chosen exponentials are computed, in
// float. A row holding NaN or +inf has NaN weights, as the softmax does.

// a ranks strictly above b: larger, or NaN above any number.
inline bool ranks_above(float a, float b) {
  return a > b || (a != a && b == b);
}

// Inserts (key, index) into the ranked list keys[0, count), keeping the best k; equal keys stay in arrival
// (expert) order.
inline void insert_top(float* keys, int64_t* idx, int64_t& count, int64_t k, float key, int64_t index) {
  if (count == k && !ranks_above(key, keys[k - 1])) return;
  int64_t pos = count < k ? count++ : k - 1;
  while (pos > 0 && ranks_above(key, keys[pos - 1])) {
    keys[pos] = keys[pos - 1];
    idx[pos] = idx[pos - 1];
    --pos;
  }
  keys[pos] = key;
  idx[pos] = index;
}

template <typename T>
void moe_gating_rows(const T* logits, float* weights, int64_t* indices, int64_t tokens, int64_t experts, int64_t k) {
  at::parallel_for(0, tokens, row_grain(experts * 4), [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(experts));
    std::vector<float> keys(static_cast<size_t>(k));
    std::vector<Entry<float>> entries;
    for (int64_t t = begin; t < end; ++t) {
      to_float(logits + t * experts, row.data(), experts);
      int64_t* top = indices + t * k;
      if (k <= 32) {
        int64_t count = 0;
        for (int64_t j = 0; j < experts; ++j) insert_top(keys.data(), top, count, k, row[j], j);
      } else {
        entries.resize(static_cast<size_t>(experts));
        for (int64_t j = 0; j < experts; ++j) entries[j] = Entry<float>{row[j], j};
        select_top(entries, experts, k);
        for (int64_t r = 0; r < k; ++r) top[r] = entries[r].index;
      }
      // the first chosen is the row's maximum (or NaN, which then spreads to every weight)
      const float max_v = row[top[0]];
      float* w = weights + t * k;
      float total = 0.0f;
      for (int64_t r = 0; r < k; ++r) {
        w[r] = std::exp(row[top[r]] - max_v);
        total += w[r];
      }
      for (int64_t r = 0; r < k; ++r) w[r] /= total;
    }
  });
}

std::tuple<Tensor, Tensor> moe_gating(const Tensor& logits_in, int64_t k) {
  check_input(logits_in, "moe_gating", "logits");
  TORCH_CHECK(logits_in.dim() == 2, "cann_bench::moe_gating: logits must be (T, E), got ", logits_in.dim(), "-d");
  const Tensor logits = logits_in.contiguous();
  const int64_t tokens = logits.size(0), experts = logits.size(1);
  TORCH_CHECK(k >= 1 && k <= experts, "cann_bench::moe_gating: k = ", k, " is outside [1, ", experts, "]");
  Tensor weights = at::empty({tokens, k}, logits.options().dtype(at::kFloat));
  Tensor indices = at::empty({tokens, k}, logits.options().dtype(at::kLong));
  if (tokens == 0) return std::make_tuple(weights, indices);
  visit_float32(logits.scalar_type(), "moe_gating", [&](auto tag) {
    using T = decltype(tag);
    moe_gating_rows(logits.data_ptr<T>(), weights.data_ptr<float>(), indices.data_ptr<int64_t>(), tokens, experts, k);
  });
  return std::make_tuple(weights, indices);
}

}  // namespace
