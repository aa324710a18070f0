// Read bandwidth of this machine, one and two threads (the roofline of docs/results/peers_analysis.md):
//   gcc -O2 -mavx512f -fopenmp docs/results/peers/read_bandwidth.c -o /tmp/bw && /tmp/bw
// Sums 512 MB of floats with AVX-512 loads, best of 5 passes per thread count.
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  size_t n = (size_t)512 << 20 >> 2;  // 512 MB of floats
  float* a = aligned_alloc(64, n * 4);
  for (size_t i = 0; i < n; ++i) a[i] = 1.0f;
  for (int threads = 1; threads <= 2; ++threads) {
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      double t = omp_get_wtime();
      float total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total)
      for (int part = 0; part < threads; ++part) {
        size_t b = n / threads * part, e = b + n / threads;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (size_t i = b; i < e; i += 64) {
          s0 = _mm512_add_ps(s0, _mm512_load_ps(a + i));
          s1 = _mm512_add_ps(s1, _mm512_load_ps(a + i + 16));
          s2 = _mm512_add_ps(s2, _mm512_load_ps(a + i + 32));
          s3 = _mm512_add_ps(s3, _mm512_load_ps(a + i + 48));
        }
        total += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
      }
      t = omp_get_wtime() - t;
      if (t < best) best = t;
      if (total < 0) printf("x");
    }
    printf("read bandwidth, %d thread(s): %.1f GB/s\n", threads, n * 4 / best / 1e9);
  }
}
