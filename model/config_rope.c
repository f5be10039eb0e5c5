/* config_rope.c: the RoPE keys of a Hugging Face config (config_rope.h): rope_theta + rope_scaling and
 * rope_parameters, each checked, then reconciled into one RoPE. */
#include "model/config_rope.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The llama3 fields, in the order they are reported. */
static const char *const LLAMA3_FIELDS[] = {"factor", "low_freq_factor", "high_freq_factor",
                                            "original_max_position_embeddings"};
#define N_LLAMA3_FIELDS 4

/* The field of r that LLAMA3_FIELDS[i] (i < 3) sets. */
static double *llama3_field(RopeKeys *r, int i) {
    return i == 0 ? &r->factor : i == 1 ? &r->low_freq_factor : &r->high_freq_factor;
}

/* v as the shortest of 15 or 17 significant digits that reads back exactly. */
static void format_exact(double v, char *out, size_t cap) {
    snprintf(out, cap, "%.15g", v);
    double back;
    if (sscanf(out, "%lf", &back) != 1 || back != v) snprintf(out, cap, "%.17g", v);
}

static int is_one_of(const char *k, const char *const *keys, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(k, keys[i]) == 0) return 1;
    return 0;
}

/* One of rope_scaling or rope_parameters (named key) into r: its type and llama3 fields, and its own rope_theta
 * (*has_theta, *theta). */
static int parse_rope_object(const cJSON *v, const char *key, RopeKeys *r, int *has_theta, double *theta,
                             const char *where, char *err, size_t errlen) {
    r->has_scaling = 1;
    if (cJSON_IsNull(v)) return 0;
    if (!cJSON_IsObject(v)) {
        snprintf(err, errlen, "%s: %s must be an object or null", where, key);
        return -1;
    }
    const cJSON *rope_type = cJSON_GetObjectItemCaseSensitive(v, "rope_type");
    const cJSON *legacy_type = cJSON_GetObjectItemCaseSensitive(v, "type");
    const char *type = "default";
    for (int i = 0; i < 2; i++) {
        const cJSON *t = i == 0 ? rope_type : legacy_type;
        if (!t) continue;
        if (!cJSON_IsString(t)) {
            snprintf(err, errlen, "%s: %s.%s must be a string", where, key, i == 0 ? "rope_type" : "type");
            return -1;
        }
        if (i == 1 && rope_type && strcmp(t->valuestring, type) != 0) {
            snprintf(err, errlen, "%s: %s.rope_type (\"%s\") and %s.type (\"%s\") disagree", where, key, type, key,
                     t->valuestring);
            return -1;
        }
        type = t->valuestring;
    }
    if (strcmp(type, "default") != 0 && strcmp(type, "llama3") != 0) {
        snprintf(err, errlen, "%s: %s.rope_type \"%s\" is not supported (only \"default\" and \"llama3\")", where, key,
                 type);
        return -1;
    }
    r->llama3 = strcmp(type, "llama3") == 0;
    static const char *const OTHER_KEYS[] = {"rope_type", "type", "rope_theta", "partial_rotary_factor"};
    for (const cJSON *f = v->child; f; f = f->next) {
        const char *k = f->string;
        int llama3_key = is_one_of(k, LLAMA3_FIELDS, N_LLAMA3_FIELDS);
        if (!llama3_key && !is_one_of(k, OTHER_KEYS, 4)) {
            snprintf(err, errlen, "%s: unknown key %s.%s", where, key, k);
            return -1;
        }
        if (llama3_key && !r->llama3) {
            snprintf(err, errlen, "%s: %s.%s is not used by rope_type \"%s\" (set \"rope_type\": \"llama3\" for "
                     "llama3 scaling)", where, key, k, type);
            return -1;
        }
        if (strcmp(k, "partial_rotary_factor") == 0 && (!cJSON_IsNumber(f) || f->valuedouble != 1)) {
            snprintf(err, errlen, "%s: %s.partial_rotary_factor must be 1 (RoPE over the whole head; this trainer "
                     "implements no other)", where, key);
            return -1;
        }
        if (strcmp(k, "rope_theta") == 0) {
            if (!cJSON_IsNumber(f)) {
                snprintf(err, errlen, "%s: %s.rope_theta must be a number", where, key);
                return -1;
            }
            *has_theta = 1;
            *theta = f->valuedouble;
        }
    }
    if (!r->llama3) return 0;
    for (int i = 0; i < N_LLAMA3_FIELDS; i++) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(v, LLAMA3_FIELDS[i]);
        if (!cJSON_IsNumber(f) || !(f->valuedouble > 0) || !isfinite(f->valuedouble)) {
            snprintf(err, errlen, "%s: %s.%s must be a positive number (rope_type \"llama3\" needs factor, "
                     "low_freq_factor, high_freq_factor and original_max_position_embeddings)", where, key,
                     LLAMA3_FIELDS[i]);
            return -1;
        }
        if (i < 3) {
            *llama3_field(r, i) = f->valuedouble;
        } else if (f->valuedouble != floor(f->valuedouble) || f->valuedouble > (1 << 24)) {
            snprintf(err, errlen, "%s: %s.%s must be an integer of at most %d", where, key, LLAMA3_FIELDS[i], 1 << 24);
            return -1;
        } else {
            r->original_max_position_embeddings = (int)f->valuedouble;
        }
    }
    if (r->high_freq_factor <= r->low_freq_factor) {
        snprintf(err, errlen, "%s: %s needs high_freq_factor > low_freq_factor", where, key);
        return -1;
    }
    return 0;
}

/* "default" or "llama3 (factor F, low_freq_factor L, ...)". */
static void describe_scaling(const RopeKeys *r, char *out, size_t cap) {
    if (!r->llama3) {
        snprintf(out, cap, "default");
        return;
    }
    char v[3][32];
    format_exact(r->factor, v[0], sizeof(v[0]));
    format_exact(r->low_freq_factor, v[1], sizeof(v[1]));
    format_exact(r->high_freq_factor, v[2], sizeof(v[2]));
    snprintf(out, cap,
             "llama3: factor %s, low_freq_factor %s, high_freq_factor %s, original_max_position_embeddings %d", v[0],
             v[1], v[2], r->original_max_position_embeddings);
}

static int same_scaling(const RopeKeys *a, const RopeKeys *b) {
    if (a->llama3 != b->llama3) return 0;
    return !a->llama3 || (a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
                          a->high_freq_factor == b->high_freq_factor &&
                          a->original_max_position_embeddings == b->original_max_position_embeddings);
}

int config_rope_keys(const cJSON *rope_theta, const cJSON *rope_scaling, const cJSON *rope_parameters,
                     RopeKeys *out, const char *where, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    /* The thetas of the three places, in this order of names. */
    static const char *const THETA_NAMES[] = {"rope_theta", "rope_scaling.rope_theta", "rope_parameters.rope_theta"};
    int has[3] = {0, 0, 0};
    double theta[3] = {0, 0, 0};
    if (rope_theta) {
        if (!cJSON_IsNumber(rope_theta)) {
            snprintf(err, errlen, "%s: key \"rope_theta\" must be a number", where);
            return -1;
        }
        has[0] = 1;
        theta[0] = rope_theta->valuedouble;
    }
    RopeKeys scaling, params;
    memset(&scaling, 0, sizeof(scaling));
    memset(&params, 0, sizeof(params));
    if (rope_scaling &&
        parse_rope_object(rope_scaling, "rope_scaling", &scaling, &has[1], &theta[1], where, err, errlen))
        return -1;
    if (rope_parameters &&
        parse_rope_object(rope_parameters, "rope_parameters", &params, &has[2], &theta[2], where, err, errlen))
        return -1;
    if (scaling.has_scaling && params.has_scaling && !same_scaling(&scaling, &params)) {
        char a[192], b[192];
        describe_scaling(&scaling, a, sizeof(a));
        describe_scaling(&params, b, sizeof(b));
        snprintf(err, errlen, "%s: rope_scaling (%s) and rope_parameters (%s) disagree; give one of them, or both "
                 "describing the same RoPE", where, a, b);
        return -1;
    }
    const RopeKeys *given = params.has_scaling ? &params : &scaling;
    *out = *given;
    for (int i = 0; i < 3; i++) {
        if (!has[i]) continue;
        if (out->has_theta && theta[i] != out->theta) {
            int first = 0;
            while (!has[first]) first++;
            char a[32], b[32];
            format_exact(out->theta, a, sizeof(a));
            format_exact(theta[i], b, sizeof(b));
            snprintf(err, errlen, "%s: %s (%s) and %s (%s) disagree", where, THETA_NAMES[first], a, THETA_NAMES[i], b);
            return -1;
        }
        out->has_theta = 1;
        out->theta = theta[i];
    }
    return 0;
}
