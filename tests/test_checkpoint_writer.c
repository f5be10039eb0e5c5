/* test_checkpoint_writer.c: checkpoints written in the background. A checkpoint holds the training state of the step
 * it was submitted at, even though the model changes while it is written; one write is in flight at a time (a second
 * submit is refused until it is waited for); a finished write is reported once, by poll or wait; the newest keep_last
 * are kept; a write that cannot be made is reported as failed with the path and leaves nothing behind. */
#include <string.h>
#include <unistd.h>

#include "persist/checkpoint.h"
#include "persist/checkpoint_writer.h"
#include "tests/ckpt_fixtures.h"
#include "tests/test_util.h"

static char dir[256];

/* The model's master weights and moments moved on, as an optimizer step would. */
static void train_on(Model *m) {
    for (size_t i = 0; i < m->table.n_params; i++) {
        m->master[i] += 0.5f;
        m->adam_m[i] -= 0.25f;
        m->adam_v[i] += 1.0f;
    }
}

static void test_background_write(Model *m, const Config *cfg) {
    char run[512], err[1024], ck[1100];
    snprintf(run, sizeof(run), "%s/run", dir);
    CheckpointWriter *w = checkpoint_writer_create(run, 2, m, err, sizeof(err));
    CHECK(w != NULL, "a writer is made%s%s", w ? "" : ": ", w ? "" : err);
    if (!w) return;
    CheckpointDone done;
    CHECK(!checkpoint_writer_busy(w) && checkpoint_writer_poll(w, &done) == 0 && checkpoint_writer_wait(w, &done) == 0,
          "with nothing in flight, poll and wait report nothing");
    size_t n = m->table.n_params * 4;
    float *master = malloc(n), *am = malloc(n), *av = malloc(n);
    memcpy(master, m->master, n);
    memcpy(am, m->adam_m, n);
    memcpy(av, m->adam_v, n);
    TrainState s = {3, {0, 0, 5}, 1, 1000, 77};
    double snap_s = -1;
    int ok = checkpoint_writer_submit(w, m, cfg, &s, &snap_s, err, sizeof(err)) == 0;
    train_on(m); /* training goes on while the checkpoint is written */
    CHECK(ok && checkpoint_writer_busy(w) && checkpoint_writer_step(w) == 3 && snap_s >= 0,
          "a submitted checkpoint is in flight (step %llu, snapshot %.4f s)%s%s",
          (unsigned long long)checkpoint_writer_step(w), snap_s, ok ? "" : ": ", ok ? "" : err);
    TrainState s4 = s;
    s4.step = 4;
    int refused = checkpoint_writer_submit(w, m, cfg, &s4, &snap_s, err, sizeof(err)) != 0;
    CHECK(refused && strstr(err, "step 4") && strstr(err, "step 3"),
          "a second submit while one is in flight is refused: %s", err);
    int polled = 0;
    for (int i = 0; i < 2000 && !polled; i++) {
        polled = checkpoint_writer_poll(w, &done);
        if (!polled) usleep(5000);
    }
    checkpoint_path(ck, sizeof(ck), run, 3);
    CHECK(polled && !done.failed && done.step == 3 && strcmp(done.stats.path, ck) == 0 && done.stats.bytes > 0 &&
              !checkpoint_writer_busy(w) && checkpoint_writer_poll(w, &done) == 0,
          "poll reports the finished write once, with its path and size");
    ok = checkpoint_holds(ck, 3, &m->cfg, master, am, av, err, sizeof(err)) == 0;
    CHECK(ok, "the checkpoint holds the state of the step it was submitted at, not the model's later values%s%s",
          ok ? "" : ": ", ok ? "" : err);
    /* three more, each waited for: keep_last 2 keeps the newest two */
    ok = 1;
    for (uint64_t step = 4; step <= 6 && ok; step++) {
        s.step = step;
        ok = checkpoint_writer_submit(w, m, cfg, &s, &snap_s, err, sizeof(err)) == 0 &&
             checkpoint_writer_wait(w, &done) == 1 && !done.failed && done.step == step;
        if (!ok && done.failed) snprintf(err, sizeof(err), "%s", done.err);
    }
    CheckpointList list;
    ok = ok && checkpoint_list(run, &list, err, sizeof(err)) == 0;
    CHECK(ok && list.n == 2 && list.steps[0] == 5 && list.steps[1] == 6,
          "wait reports each write; keep_last 2 keeps the newest two (%d left)%s%s", ok ? list.n : -1, ok ? "" : ": ",
          ok ? "" : err);
    if (ok) checkpoint_list_free(&list);
    s.step = 7;
    ok = checkpoint_writer_submit(w, m, cfg, &s, &snap_s, err, sizeof(err)) == 0;
    checkpoint_writer_destroy(w); /* waits for the write in flight */
    checkpoint_path(ck, sizeof(ck), run, 7);
    CHECK(ok && checkpoint_holds(ck, 7, &m->cfg, m->master, m->adam_m, m->adam_v, err, sizeof(err)) == 0,
          "destroying the writer waits for the write in flight, which completes");
    free(master);
    free(am);
    free(av);
}

static void test_failed_write(Model *m, const Config *cfg) {
    char file[512], run[600], err[1024];
    snprintf(file, sizeof(file), "%s/a_file", dir);
    write_bytes(file, "x", 1);
    snprintf(run, sizeof(run), "%s/run", file); /* under a regular file: cannot be made, even by root */
    CheckpointWriter *w = checkpoint_writer_create(run, 2, m, err, sizeof(err));
    TrainState s = {8, {0, 0, 0}, 1, 1000, 1};
    double snap_s;
    CheckpointDone done;
    int ok = w && checkpoint_writer_submit(w, m, cfg, &s, &snap_s, err, sizeof(err)) == 0 &&
             checkpoint_writer_wait(w, &done) == 1;
    CHECK(ok && done.failed && done.step == 8 && strstr(done.err, run) && !checkpoint_writer_busy(w),
          "a write that cannot be made is reported as failed, naming the path: %s", ok ? done.err : err);
    checkpoint_writer_destroy(w);
}

int main(void) {
    make_temp_dir(dir, sizeof(dir), "test_checkpoint_writer");
    ModelConfig c = small_model_config(0);
    Model m;
    create_model(&m, &c, 7, 1);
    Config cfg;
    config_defaults(&cfg);
    cfg.model = c;
    test_background_write(&m, &cfg);
    test_failed_write(&m, &cfg);
    model_destroy(&m);
    remove_temp_dir(dir);
    return test_summary();
}
