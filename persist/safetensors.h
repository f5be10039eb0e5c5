/* safetensors.h: reading and writing the safetensors format (Hugging Face): an 8-byte little-endian header length N,
 * N bytes of JSON ({"__metadata__": {...}, "name": {"dtype": "BF16", "shape": [r, c], "data_offsets": [b, e]}, ...},
 * offsets relative to the data section that follows the header), then the data, little-endian, row-major.
 *
 * The reader validates the header against the file: every tensor's byte range must match its shape and dtype, lie
 * inside the file, and the ranges must tile the data section without gaps or overlaps (so a truncated file or a header
 * that lies about offsets is an error naming the file and the tensor). Values are read converted to fp32 from F32,
 * F16 and BF16; other dtypes are recognised (for sizes and messages) but not read. The writer streams fp32 values and
 * converts them to the tensor's dtype (round to nearest even). */
#ifndef SAFETENSORS_H
#define SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_F32, ST_F16, ST_BF16, /* readable and writable */
    ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_U16, ST_U32, ST_U64, ST_F8_E4M3, ST_F8_E5M2,
} StDtype;

#define ST_MAX_DIMS 8
#define ST_NAME_MAX 256

typedef struct StTensorInfo {
    char name[ST_NAME_MAX];
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data section */
} StTensorInfo;

const char *st_dtype_name(StDtype d); /* "F32", "BF16", ... */
size_t st_dtype_size(StDtype d);
uint64_t st_numel(const StTensorInfo *t);

/* fp32 <-> 16-bit conversions (round to nearest even; NaN stays NaN, overflow becomes infinity). */
uint16_t st_f32_to_bf16(float f);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_f16_to_f32(uint16_t h);

/* ---- reader ---- */
typedef struct StFile StFile;
StFile *st_open(const char *path, char *err, size_t errlen);
void st_close(StFile *f);
const char *st_path(const StFile *f);
int st_count(const StFile *f);
const StTensorInfo *st_tensor(const StFile *f, int i);
const StTensorInfo *st_find(const StFile *f, const char *name); /* NULL when absent */
/* Reads n elements starting at element `first` of tensor t, converted to fp32. 0, or -1 with a message. */
int st_read_f32(StFile *f, const StTensorInfo *t, uint64_t first, size_t n, float *out, char *err, size_t errlen);

/* ---- writer ---- */
typedef struct StWriter StWriter;
/* Creates path and writes the header for the n tensors (name, dtype, ndim, shape of each; the offsets are assigned
 * in order) with "__metadata__": {"format": "pt"}. The data must then be appended tensor after tensor, in order. */
StWriter *st_writer_open(const char *path, const StTensorInfo *tensors, int n, char *err, size_t errlen);
/* Appends n fp32 values, converted to the dtype of the tensor they fall in (they may span tensors). */
int st_writer_append_f32(StWriter *w, const float *values, size_t n, char *err, size_t errlen);
/* The CRC32 (zlib's) of the bytes written so far, header included, and their number: once every tensor is appended,
 * those of the whole file. */
uint32_t st_writer_crc32(const StWriter *w);
uint64_t st_writer_bytes(const StWriter *w);
/* Checks that every byte was written, then flushes, fsyncs and closes. Frees w whatever happens. */
int st_writer_close(StWriter *w, char *err, size_t errlen);
/* Closes and deletes the partial file. */
void st_writer_abort(StWriter *w);

#endif
