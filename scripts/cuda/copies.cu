// Copies of every shape a CUDA C++ program makes (issue 53), for scripts/gpu-every-call.sh:
// pitched memory (cudaMallocPitch) filled by cudaMemcpy2D from a padded host image, a kernel
// that doubles it in place, cudaMemcpy2DAsync of a sub-rectangle back, a cudaMemcpy3D box
// there and back (cudaMalloc3D), and cudaMemcpyDefault both ways. Prints a checksum of each
// read back; `gputape run -o` then `replay --on cuda` must read back the same bytes.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void twice(unsigned char *img, size_t pitch, int width, int height) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < width && y < height) img[y * pitch + x] = (unsigned char)(img[y * pitch + x] * 2);
}

static unsigned sum(const unsigned char *p, size_t n) {
    unsigned s = 0;
    for (size_t i = 0; i < n; i++) s = s * 31 + p[i];
    return s;
}

#define CHECK(e)                                                                  \
    do {                                                                          \
        cudaError_t r = (e);                                                      \
        if (r != cudaSuccess) {                                                   \
            printf("copies: %s failed: %s\n", #e, cudaGetErrorString(r));         \
            return 2;                                                             \
        }                                                                         \
    } while (0)

int main() {
    const int W = 100, H = 37;
    static unsigned char host[H][128], back[H][128], sub[5][16];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < 128; x++) host[y][x] = (unsigned char)(y * 7 + x);
    unsigned char *img;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&img, &pitch, W, H));
    CHECK(cudaMemcpy2D(img, pitch, host, 128, W, H, cudaMemcpyHostToDevice));
    twice<<<dim3(1, H), 128>>>(img, pitch, W, H);
    memset(back, 0, sizeof back);
    CHECK(cudaMemcpy2D(back, 128, img, pitch, W, H, cudaMemcpyDeviceToHost));
    printf("copies: 2D round trip %u (pitch %zu)\n", sum(&back[0][0], sizeof back), pitch);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpy2DAsync(sub, 16, img + 3 * pitch + 10, pitch, 16, 5, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    printf("copies: 2D sub-rectangle %u\n", sum(&sub[0][0], sizeof sub));

    static unsigned char box[4][6][20], box2[4][6][20];
    for (size_t i = 0; i < sizeof box; i++) (&box[0][0][0])[i] = (unsigned char)(i * 13 + 1);
    cudaExtent ext = make_cudaExtent(20, 6, 4);
    cudaPitchedPtr vol;
    CHECK(cudaMalloc3D(&vol, ext));
    cudaMemcpy3DParms in = {};
    in.srcPtr = make_cudaPitchedPtr(box, 20, 20, 6);
    in.dstPtr = vol;
    in.extent = ext;
    in.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&in));
    cudaMemcpy3DParms out = {};
    out.srcPtr = vol;
    out.dstPtr = make_cudaPitchedPtr(box2, 20, 20, 6);
    out.extent = ext;
    out.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&out));
    printf("copies: 3D round trip %u (same: %d)\n", sum(&box2[0][0][0], sizeof box2),
           memcmp(box, box2, sizeof box) == 0);

    unsigned char lin[256], *d;
    for (int i = 0; i < 256; i++) lin[i] = (unsigned char)(255 - i);
    CHECK(cudaMalloc(&d, 256));
    CHECK(cudaMemcpy(d, lin, 256, cudaMemcpyDefault));
    memset(lin, 0, sizeof lin);
    CHECK(cudaMemcpy(lin, d, 256, cudaMemcpyDefault));
    printf("copies: default-kind round trip %u\n", sum(lin, sizeof lin));
    CHECK(cudaFree(d));
    CHECK(cudaFree(vol.ptr));
    CHECK(cudaFree(img));
    return 0;
}
