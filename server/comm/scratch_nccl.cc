#include <nccl.h>
#include <cuda_runtime.h>
#include <cstdio>
int main() { int n = 0; cudaError_t e = cudaGetDeviceCount(&n); int v=0; ncclGetVersion(&v); std::printf("%d %s %d\n", n, cudaGetErrorString(e), v); }
