/* progress.c: the progress line's timing, the printing interval and the run's summary (see progress.h). */
#include "cli/progress.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "persist/checkpoint.h"
#include "util/fsutil.h"

void progress_start(Progress *p, int first_step, int steps, int log_every, double loop_start) {
    memset(p, 0, sizeof(*p));
    p->first_step = first_step;
    p->steps = steps;
    p->every = log_every > 0 ? log_every : steps / 100 > 1 ? steps / 100 : 1;
    p->loop_start = loop_start;
}

int progress_prints(const Progress *p, int step) {
    return step == p->first_step || step == p->steps || step % p->every == 0;
}

void progress_step(Progress *p, double seconds, int64_t tokens) {
    p->steps_done++;
    p->tokens += tokens;
    p->step_seconds += seconds;
}

void progress_read_validation(Progress *p, const char *log_path) {
    char err[256];
    size_t len;
    char *text = fs_read_all(log_path, SIZE_MAX, &len, err, sizeof(err));
    if (!text) return;
    for (char *line = text; line < text + len;) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        cJSON *rec = cJSON_ParseWithLength(line, (size_t)(end - line));
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(rec, "step");
        const cJSON *val = cJSON_GetObjectItemCaseSensitive(rec, "val_loss");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(val)) progress_val(p, step->valueint, val->valuedouble);
        cJSON_Delete(rec);
        line = end + 1;
    }
    free(text);
}

void progress_duration(double seconds, char *out, size_t cap) {
    const long s = lround(seconds > 0 ? seconds : 0);
    if (seconds < 9.95) snprintf(out, cap, "%.1fs", seconds > 0 ? seconds : 0);
    else if (seconds < 59.5) snprintf(out, cap, "%.0fs", seconds);
    else if (s < 3600) snprintf(out, cap, "%ldm%02lds", s / 60, s % 60);
    else snprintf(out, cap, "%ldh%02ldm", s / 3600, s % 3600 / 60);
}

void progress_times(const Progress *p, int step, double now, char *out, size_t cap) {
    const double elapsed = now - p->loop_start;
    const int done = step - p->first_step + 1, left = p->steps - step;
    char e[32], eta[32];
    progress_duration(elapsed, e, sizeof(e));
    progress_duration(done > 0 ? elapsed / done * left : 0, eta, sizeof(eta));
    snprintf(out, cap, " | %s elapsed | ETA %s", e, eta);
}

void progress_val(Progress *p, int step, double val_loss) {
    if (p->n_val == 0 || val_loss < p->best_val) {
        p->best_val = val_loss;
        p->best_val_step = step;
    }
    p->last_val = val_loss;
    p->last_val_step = step;
    p->n_val++;
}

/* The newest complete checkpoint of run_dir into out, or "" when there is none (or the directory does not list). */
static void newest_checkpoint(const char *run_dir, char *out, size_t cap) {
    char err[256];
    CheckpointList list;
    out[0] = 0;
    if (checkpoint_list(run_dir, &list, err, sizeof(err))) return;
    if (list.n > 0) checkpoint_path(out, cap, run_dir, list.steps[list.n - 1]);
    checkpoint_list_free(&list);
}

/* n with commas between groups of three digits: "2,048,000". */
static const char *grouped(int64_t n, char out[32]) {
    char digits[24];
    int len = snprintf(digits, sizeof(digits), "%lld", (long long)(n < 0 ? 0 : n)), o = 0;
    for (int i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = 0;
    return out;
}

void progress_summary(const Progress *p, FILE *out, double wall_seconds, double mfu_scale, const char *run_dir,
                      const char *prog) {
    char newest[CHECKPOINT_PATH_MAX];
    newest_checkpoint(run_dir, newest, sizeof(newest));
    char wall[32];
    progress_duration(wall_seconds, wall, sizeof(wall));
    const double tok_s = p->step_seconds > 0 ? p->tokens / p->step_seconds : 0;
    fprintf(out, "---- summary ----\n");
    if (p->steps_done > 0) {
        char tokens[32], rate[32];
        fprintf(out, "steps %d-%d of %d: %s tokens, %s wall time, %s tokens/s over the steps", p->first_step,
                p->first_step + p->steps_done - 1, p->steps, grouped(p->tokens, tokens), wall,
                grouped(llround(tok_s), rate));
        if (mfu_scale > 0) fprintf(out, ", MFU %.1f%%", 100 * tok_s * mfu_scale);
        fprintf(out, "\n");
    } else {
        fprintf(out, "no step trained, %s wall time\n", wall);
    }
    if (p->n_val > 0)
        fprintf(out, "validation loss: %.4f at step %d (the last), best %.4f at step %d\n", p->last_val,
                p->last_val_step, p->best_val, p->best_val_step);
    else
        fprintf(out, "validation loss: none computed (no val_data, or eval_every 0)\n");
    if (newest[0])
        fprintf(out, "newest checkpoint: %s\ngenerate from it: %s --generate %s\n", newest, prog, newest);
    else
        fprintf(out, "no checkpoint was written\n");
    fflush(out);
}
