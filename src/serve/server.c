/* The HTTP side of `classic serve` on libmicrohttpd: routes, the token,
 * the limits, each request's images prepared on its connection's thread
 * and queued for its model's batch, and the JSON answers. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/error.h"
#include "io/strbuf.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/protocol.h"
#include "serve/serve.h"

struct cl_server {
    cl_serve_opts o;
    cl_serve_model *models;
    const char **names;
    int n;
    cl_serve_metrics metrics;
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu; /* in_flight, draining */
    pthread_cond_t idle;
    int in_flight;
    int draining;
};

void cl_serve_opts_defaults(cl_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_batch = 16;
    o->max_delay_ms = 5;
    o->queue = 256;
    o->max_body = (size_t)20 << 20;
    o->max_pixels = 40000000ull;
    o->max_connections = 256;
    o->timeout_s = 10;
}

enum route {
    R_NONE,
    R_PAGE,
    R_METRICS,
    R_LIVE,
    R_READY,
    R_SERVER,
    R_LIST,
    R_MODEL,
    R_MODEL_READY,
    R_INFER,
    R_CLASSIFY
};

/* One request, from its headers to its answer. */
typedef struct req {
    enum route route;
    int model; /* index, -1 for none */
    cl_strbuf body;
    int too_big;
    double t0;
    int counted;   /* in the server's in_flight */
    int preparing; /* counted in its model's preparing */
    int answered;  /* a response is queued: the rest of the body is dropped */
} req;

/* ------------------------------------------------------------- answers */

static enum MHD_Result respond(cl_server *sv, struct MHD_Connection *con,
                               req *r, int code, const char *ctype,
                               const char *body, size_t len, const char *hdr,
                               const char *hdr_val)
{
    struct MHD_Response *res = MHD_create_response_from_buffer(
        len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!res)
        return MHD_NO;
    MHD_add_response_header(res, "Content-Type", ctype);
    MHD_add_response_header(res, "Cache-Control", "no-store");
    MHD_add_response_header(res, "X-Content-Type-Options", "nosniff");
    if (hdr)
        MHD_add_response_header(res, hdr, hdr_val);
    enum MHD_Result ok = MHD_queue_response(con, (unsigned)code, res);
    MHD_destroy_response(res);
    if (r && ok == MHD_YES)
        r->answered = 1;
    /* Latency is an inference request's, not a health probe's. */
    int timed = r && (r->route == R_INFER || r->route == R_CLASSIFY);
    cl_serve_metrics_request(&sv->metrics, r ? r->model : -1, code,
                             timed ? cl_serve_now() - r->t0 : -1);
    return ok;
}

static enum MHD_Result respond_json(cl_server *sv, struct MHD_Connection *con,
                                    req *r, int code, cl_strbuf *b)
{
    if (b->failed)
        return respond(sv, con, r, 500, "application/json",
                       "{\"error\":\"out of memory\"}\n", 26, NULL, NULL);
    return respond(sv, con, r, code, "application/json", cl_strbuf_str(b),
                   b->len, NULL, NULL);
}

/* A client's mistake (or the server's state) as {"error": sentence}. */
static enum MHD_Result fail(cl_server *sv, struct MHD_Connection *con, req *r,
                            int code, const char *fmt, ...) CL_PRINTF(5, 6);

static enum MHD_Result fail(cl_server *sv, struct MHD_Connection *con, req *r,
                            int code, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cl_strbuf b;
    cl_strbuf_init(&b);
    cl_serve_json_error(&b, msg);
    const char *h = NULL, *v = NULL;
    if (code == 503) {
        h = "Retry-After";
        v = "1";
    } else if (code == 401) {
        h = "WWW-Authenticate";
        v = "Bearer";
    } else if (code == 405) {
        h = "Allow";
        v = r && (r->route == R_INFER || r->route == R_CLASSIFY) ? "POST"
                                                                 : "GET";
    }
    enum MHD_Result ok = b.failed
                             ? MHD_NO
                             : respond(sv, con, r, code, "application/json",
                                       cl_strbuf_str(&b), b.len, h, v);
    cl_strbuf_free(&b);
    return ok;
}

/* The status a failed preparation of an image answers with. */
static int image_code(cl_status s)
{
    return s == CL_ERR_LIMIT                                            ? 413
           : s == CL_ERR_FORMAT || s == CL_ERR_SHAPE || s == CL_ERR_ARG ? 400
                                                                        : 500;
}

/* ------------------------------------------------------------- routing */

static int model_index(const cl_server *sv, const char *name, size_t n)
{
    for (int i = 0; i < sv->n; i++)
        if (strlen(sv->models[i].name) == n &&
            memcmp(sv->models[i].name, name, n) == 0)
            return i;
    return -1;
}

/* The route of a path and the model it names (*name, *name_len; NULL when
 * none). */
static enum route parse_route(const char *url, const char **name,
                              size_t *name_len)
{
    *name = NULL;
    *name_len = 0;
    if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
        return R_PAGE;
    if (strcmp(url, "/metrics") == 0)
        return R_METRICS;
    if (strcmp(url, "/v2/health/live") == 0)
        return R_LIVE;
    if (strcmp(url, "/v2/health/ready") == 0)
        return R_READY;
    if (strcmp(url, "/v2") == 0)
        return R_SERVER;
    if (strcmp(url, "/v1/models") == 0)
        return R_LIST;
    if (strncmp(url, "/v1/models/", 11) == 0) {
        const char *p = url + 11, *colon = strrchr(p, ':');
        if (!colon || strcmp(colon, ":classify") != 0 || colon == p ||
            memchr(p, '/', (size_t)(colon - p)))
            return R_NONE;
        *name = p;
        *name_len = (size_t)(colon - p);
        return R_CLASSIFY;
    }
    if (strncmp(url, "/v2/models/", 11) == 0) {
        const char *p = url + 11, *slash = strchr(p, '/');
        *name = p;
        *name_len = slash ? (size_t)(slash - p) : strlen(p);
        if (*name_len == 0)
            return R_NONE;
        const char *rest = slash ? slash : "";
        /* A version segment names the one version served. */
        if (strncmp(rest, "/versions/", 10) == 0) {
            const char *v = rest + 10, *e = strchr(v, '/');
            if (e == v)
                return R_NONE;
            rest = e ? e : "";
        }
        if (*rest == '\0')
            return R_MODEL;
        if (strcmp(rest, "/ready") == 0)
            return R_MODEL_READY;
        if (strcmp(rest, "/infer") == 0)
            return R_INFER;
    }
    return R_NONE;
}

/* Constant-time comparison of the Authorization header with the token. */
static int authorised(const cl_server *sv, struct MHD_Connection *con)
{
    if (!sv->o.token)
        return 1;
    const char *h =
        MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return 0;
    h += 7;
    size_t n = strlen(h), t = strlen(sv->o.token);
    unsigned char diff = n != t;
    for (size_t i = 0; i < n && i < t; i++)
        diff |= (unsigned char)(h[i] ^ sv->o.token[i]);
    return diff == 0;
}

/* The media type of the request, lower case, without parameters. */
static void media_type(struct MHD_Connection *con, char *out, size_t n)
{
    const char *h =
        MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Type");
    size_t k = 0;
    while (h && h[k] && h[k] != ';' && h[k] != ' ' && k + 1 < n) {
        out[k] = (char)(h[k] >= 'A' && h[k] <= 'Z' ? h[k] + 32 : h[k]);
        k++;
    }
    out[k] = '\0';
}

static int classify_media_ok(const char *mt)
{
    return !mt[0] || strcmp(mt, "image/jpeg") == 0 ||
           strcmp(mt, "image/png") == 0 ||
           strcmp(mt, "application/octet-stream") == 0 ||
           strcmp(mt, "multipart/form-data") == 0;
}

static void list_models(const cl_server *sv, char *out, size_t n)
{
    size_t k = 0;
    out[0] = '\0';
    for (int i = 0; i < sv->n && k + 1 < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s", i ? ", " : "",
                              sv->models[i].name);
}

/* ------------------------------------------------------------ GET routes */

static enum MHD_Result get_route(cl_server *sv, struct MHD_Connection *con,
                                 req *r)
{
    cl_strbuf b;
    cl_strbuf_init(&b);
    enum MHD_Result ok;
    cl_serve_model *m = r->model >= 0 ? &sv->models[r->model] : NULL;
    switch (r->route) {
    case R_PAGE:
        return respond(sv, con, r, 200, "text/html; charset=utf-8",
                       cl_serve_page, strlen(cl_serve_page), NULL, NULL);
    case R_METRICS: {
        int *depth = calloc((size_t)sv->n + 1, sizeof *depth);
        if (!depth)
            return MHD_NO;
        for (int i = 0; i < sv->n; i++)
            depth[i] = cl_serve_depth(&sv->models[i]);
        cl_serve_metrics_render(&sv->metrics, sv->names, depth, cl_serve_now(),
                                &b);
        free(depth);
        ok = b.failed ? MHD_NO
                      : respond(sv, con, r, 200,
                                "text/plain; version=0.0.4; charset=utf-8",
                                cl_strbuf_str(&b), b.len, NULL, NULL);
        cl_strbuf_free(&b);
        return ok;
    }
    case R_LIVE:
    case R_READY:
        cl_strbuf_addf(&b, "{\"%s\":true}\n",
                       r->route == R_LIVE ? "live" : "ready");
        break;
    case R_MODEL_READY:
        cl_strbuf_adds(&b, "{\"name\":");
        cl_strbuf_add_json_str(&b, m->name, strlen(m->name));
        cl_strbuf_adds(&b, ",\"ready\":true}\n");
        break;
    case R_SERVER:
        cl_strbuf_addf(&b,
                       "{\"name\":\"classic\",\"version\":\"%s\","
                       "\"extensions\":[]}\n",
                       cl_version());
        break;
    case R_LIST:
    case R_MODEL: {
        if (r->route == R_LIST)
            cl_strbuf_adds(&b, "{\"models\":[");
        for (int i = 0; i < sv->n; i++) {
            if (r->route == R_MODEL && i != r->model)
                continue;
            cl_serve_model *mi = &sv->models[i];
            cl_serve_gen *g = cl_serve_gen_get(mi);
            if (r->route == R_LIST && i)
                cl_strbuf_addc(&b, ',');
            cl_strbuf_adds(&b, "{\"name\":");
            cl_strbuf_add_json_str(&b, mi->name, strlen(mi->name));
            cl_strbuf_addf(&b,
                           ",\"versions\":[\"1\"],\"platform\":\"classic\","
                           "\"inputs\":[{\"name\":\"input\",\"datatype\":"
                           "\"FP32\",\"shape\":[-1,%d,%d,%d]},{\"name\":"
                           "\"image\",\"datatype\":\"BYTES\",\"shape\":[-1]}],"
                           "\"outputs\":[{\"name\":\"probabilities\","
                           "\"datatype\":\"FP32\",\"shape\":[-1,%d]},{\"name\":"
                           "\"top_k_indices\",\"datatype\":\"INT64\","
                           "\"shape\":[-1,-1]},{\"name\":\"top_k_classes\","
                           "\"datatype\":\"BYTES\",\"shape\":[-1,-1]},"
                           "{\"name\":\"top_k_probabilities\",\"datatype\":"
                           "\"FP32\",\"shape\":[-1,-1]}],\"parameters\":{"
                           "\"precision\":\"%s\",\"max_batch\":%d,"
                           "\"batch_cap\":%d,\"classes\":[",
                           g->in_c, g->side, g->side, g->num_classes,
                           cl_classifier_precision(g->c), mi->max_batch,
                           g->batch_cap);
            for (int k = 0; k < g->num_classes; k++) {
                const char *cn = cl_classifier_class_name(g->c, k);
                if (k)
                    cl_strbuf_addc(&b, ',');
                cl_strbuf_add_json_str(&b, cn, strlen(cn));
            }
            cl_strbuf_adds(&b, "]}}");
            cl_serve_gen_put(mi, g);
        }
        cl_strbuf_adds(&b, r->route == R_LIST ? "]}\n" : "\n");
        break;
    }
    default:
        cl_strbuf_free(&b);
        return fail(sv, con, r, 404, "no such route");
    }
    ok = respond_json(sv, con, r, 200, &b);
    cl_strbuf_free(&b);
    return ok;
}

/* ------------------------------------------------------------- inference */

/* Queues n prepared images x (n, per) of g and waits for their probs
 * (n, num_classes).  503 when the queue is full or the server stops. */
static int run_images(cl_serve_model *m, cl_serve_gen *g, req *r, int n,
                      const float *x, float *probs)
{
    cl_serve_item *items = calloc((size_t)n, sizeof *items);
    if (!items)
        return 500;
    cl_serve_waiter w;
    cl_serve_waiter_init(&w, n);
    for (int i = 0; i < n; i++) {
        items[i].gen = g;
        items[i].x = x + (size_t)i * g->per;
        items[i].probs = probs + (size_t)i * g->num_classes;
        items[i].w = &w;
    }
    r->preparing = 0; /* the queue takes it over */
    cl_status s = cl_serve_enqueue(m, items, n);
    if (s != CL_OK) {
        w.pending = 0;
        cl_serve_waiter_wait(&w);
        free(items);
        return 503;
    }
    cl_serve_waiter_wait(&w);
    int code = 200;
    for (int i = 0; i < n; i++)
        if (items[i].status != CL_OK)
            code = 500;
    free(items);
    return code;
}

/* The image bytes of a classify request into (*img, *len). */
static enum MHD_Result classify_body(cl_server *sv, struct MHD_Connection *con,
                                     req *r, const uint8_t **img, size_t *len)
{
    char mt[64];
    media_type(con, mt, sizeof mt);
    *img = (const uint8_t *)r->body.data;
    *len = r->body.len;
    if (strcmp(mt, "multipart/form-data") == 0) {
        cl_status s = cl_serve_multipart_file(
            MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Type"),
            *img, *len, img, len);
        if (s != CL_OK)
            return fail(sv, con, r, 400, "%s", cl_last_error());
    }
    if (!*img || !cl_serve_sniff(*img, *len)) {
        uint8_t h[4] = {0, 0, 0, 0};
        if (*img)
            memcpy(h, *img, *len < 4 ? *len : 4);
        return fail(sv, con, r, 400,
                    "the image is not a JPEG or PNG file (%zu bytes starting "
                    "%02x %02x %02x %02x)",
                    *len, h[0], h[1], h[2], h[3]);
    }
    return MHD_YES;
}

static int top_k_arg(struct MHD_Connection *con, int num_classes)
{
    const char *t =
        MHD_lookup_connection_value(con, MHD_GET_ARGUMENT_KIND, "top");
    int k = t ? atoi(t) : 5;
    if (k < 1)
        k = 1;
    return k > num_classes ? num_classes : k;
}

static void add_float(cl_strbuf *b, float v)
{
    cl_strbuf_addf(b, "%.9g", (double)v);
}

static enum MHD_Result classify(cl_server *sv, struct MHD_Connection *con,
                                req *r)
{
    cl_serve_model *m = &sv->models[r->model];
    const uint8_t *img = NULL;
    size_t len = 0;
    enum MHD_Result ok = classify_body(sv, con, r, &img, &len);
    if (ok != MHD_YES || !cl_serve_sniff(img, len))
        return ok;
    cl_serve_gen *g = cl_serve_gen_get(m);
    float *x = malloc(g->per * sizeof *x);
    float *probs = malloc((size_t)g->num_classes * sizeof *probs);
    cl_prediction *top = calloc((size_t)g->num_classes, sizeof *top);
    cl_strbuf b;
    cl_strbuf_init(&b);
    if (!x || !probs || !top) {
        ok = fail(sv, con, r, 500, "the server is out of memory");
        goto done;
    }
    cl_status s = cl_classifier_prepare(g->c, img, len, sv->o.max_pixels, x);
    if (s != CL_OK) {
        ok = fail(sv, con, r, image_code(s), "%s", cl_last_error());
        goto done;
    }
    int code = run_images(m, g, r, 1, x, probs);
    if (code != 200) {
        ok = code == 503 ? fail(sv, con, r, 503,
                                "model %s's queue is full or the server is "
                                "stopping; retry shortly",
                                m->name)
                         : fail(sv, con, r, 500, "inference failed");
        goto done;
    }
    int k =
        cl_classifier_top_k(g->c, probs, top_k_arg(con, g->num_classes), top);
    cl_strbuf_adds(&b, "{\"model\":");
    cl_strbuf_add_json_str(&b, m->name, strlen(m->name));
    cl_strbuf_adds(&b, ",\"top\":[");
    for (int t = 0; t < k; t++) {
        cl_strbuf_adds(&b, t ? ",{\"class\":" : "{\"class\":");
        cl_strbuf_add_json_str(&b, top[t].name, strlen(top[t].name));
        cl_strbuf_addf(&b, ",\"index\":%d,\"prob\":", top[t].index);
        add_float(&b, top[t].prob);
        cl_strbuf_addc(&b, '}');
    }
    cl_strbuf_addf(&b, "],\"latency_ms\":%.3f}\n",
                   1e3 * (cl_serve_now() - r->t0));
    ok = respond_json(sv, con, r, 200, &b);
done:
    cl_strbuf_free(&b);
    free(top);
    free(probs);
    free(x);
    cl_serve_gen_put(m, g);
    return ok;
}

/* One output tensor of an infer answer: name, datatype, shape [n, k] and
 * its values from rows of probs (the top-k's when top is set). */
static void infer_output(cl_strbuf *b, int *first, const char *name,
                         const char *dt, int n, int k)
{
    cl_strbuf_adds(b, *first ? "{\"name\":\"" : ",{\"name\":\"");
    *first = 0;
    cl_strbuf_addf(b, "%s\",\"datatype\":\"%s\",\"shape\":[%d,%d],\"data\":[",
                   name, dt, n, k);
}

static enum MHD_Result infer(cl_server *sv, struct MHD_Connection *con, req *r)
{
    cl_serve_model *m = &sv->models[r->model];
    cl_serve_gen *g = cl_serve_gen_get(m);
    cl_serve_infer q;
    cl_strbuf b;
    cl_strbuf_init(&b);
    float *x = NULL, *probs = NULL;
    cl_prediction *top = NULL;
    enum MHD_Result ok;
    cl_status s =
        cl_serve_infer_parse(r->body.data ? r->body.data : "", r->body.len,
                             g->in_c, g->side, m->cap, &q);
    if (s != CL_OK) {
        ok = fail(sv, con, r, s == CL_ERR_NOMEM ? 500 : 400, "%s",
                  cl_last_error());
        goto done;
    }
    int n = q.n, K = g->num_classes;
    int k = q.top_k < K ? q.top_k : K;
    probs = malloc((size_t)n * K * sizeof *probs);
    top = calloc((size_t)k, sizeof *top);
    if (q.is_bytes)
        x = malloc((size_t)n * g->per * sizeof *x);
    if (!probs || !top || (q.is_bytes && !x)) {
        ok = fail(sv, con, r, 500, "the server is out of memory");
        goto done_q;
    }
    for (int i = 0; q.is_bytes && i < n; i++) {
        const uint8_t *img = q.bytes + q.off[i];
        if (!cl_serve_sniff(img, q.len[i])) {
            ok = fail(sv, con, r, 400,
                      "inputs[0].data[%d] is not a JPEG or PNG file (%zu "
                      "bytes)",
                      i, q.len[i]);
            goto done_q;
        }
        s = cl_classifier_prepare(g->c, img, q.len[i], sv->o.max_pixels,
                                  x + (size_t)i * g->per);
        if (s != CL_OK) {
            ok = fail(sv, con, r, image_code(s), "inputs[0].data[%d]: %s", i,
                      cl_last_error());
            goto done_q;
        }
    }
    int code = run_images(m, g, r, n, q.is_bytes ? x : q.x, probs);
    if (code != 200) {
        ok = code == 503 ? fail(sv, con, r, 503,
                                "model %s's queue has no room for %d images "
                                "or the server is stopping; retry shortly",
                                m->name, n)
                         : fail(sv, con, r, 500, "inference failed");
        goto done_q;
    }
    cl_strbuf_adds(&b, "{\"model_name\":");
    cl_strbuf_add_json_str(&b, m->name, strlen(m->name));
    cl_strbuf_adds(&b, ",\"model_version\":\"1\"");
    if (q.id[0]) {
        cl_strbuf_adds(&b, ",\"id\":");
        cl_strbuf_add_json_str(&b, q.id, strlen(q.id));
    }
    cl_strbuf_adds(&b, ",\"outputs\":[");
    int first = 1;
    if (q.outputs & CL_SERVE_OUT_PROBS) {
        infer_output(&b, &first, "probabilities", "FP32", n, K);
        for (size_t i = 0; i < (size_t)n * K; i++) {
            if (i)
                cl_strbuf_addc(&b, ',');
            add_float(&b, probs[i]);
        }
        cl_strbuf_adds(&b, "]}");
    }
    static const struct {
        int bit;
        const char *name, *dt;
    } tops[] = {{CL_SERVE_OUT_INDICES, "top_k_indices", "INT64"},
                {CL_SERVE_OUT_CLASSES, "top_k_classes", "BYTES"},
                {CL_SERVE_OUT_TOPPROBS, "top_k_probabilities", "FP32"}};
    for (int o = 0; o < 3; o++) {
        if (!(q.outputs & tops[o].bit))
            continue;
        infer_output(&b, &first, tops[o].name, tops[o].dt, n, k);
        for (int i = 0; i < n; i++) {
            cl_classifier_top_k(g->c, probs + (size_t)i * K, k, top);
            for (int t = 0; t < k; t++) {
                if (i || t)
                    cl_strbuf_addc(&b, ',');
                if (o == 0)
                    cl_strbuf_addf(&b, "%d", top[t].index);
                else if (o == 1)
                    cl_strbuf_add_json_str(&b, top[t].name,
                                           strlen(top[t].name));
                else
                    add_float(&b, top[t].prob);
            }
        }
        cl_strbuf_adds(&b, "]}");
    }
    cl_strbuf_adds(&b, "]}\n");
    ok = respond_json(sv, con, r, 200, &b);
done_q:
    cl_serve_infer_free(&q);
done:
    cl_strbuf_free(&b);
    free(top);
    free(probs);
    free(x);
    cl_serve_gen_put(m, g);
    return ok;
}

/* -------------------------------------------------------- the connection */

/* The first call of a request: its route, method, token, model and
 * declared size, each refused before the body is read. */
static enum MHD_Result start_request(cl_server *sv, struct MHD_Connection *con,
                                     const char *url, const char *method,
                                     req *r)
{
    const char *name;
    size_t name_len;
    r->route = parse_route(url, &name, &name_len);
    int post = strcmp(method, "POST") == 0;
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    pthread_mutex_lock(&sv->mu);
    int draining = sv->draining;
    pthread_mutex_unlock(&sv->mu);
    if (draining)
        return fail(sv, con, r, 503, "the server is shutting down");
    if (r->route == R_NONE)
        return fail(sv, con, r, 404,
                    "no route %.200s: the routes are /, /metrics, "
                    "/v2/health/live, /v2/health/ready, /v2, /v2/models/NAME, "
                    "/v2/models/NAME/ready, /v2/models/NAME/infer, /v1/models "
                    "and /v1/models/NAME:classify",
                    url);
    int wants_post = r->route == R_INFER || r->route == R_CLASSIFY;
    if (wants_post ? !post : !get)
        return fail(sv, con, r, 405, "%s is not allowed on %.200s: use %s",
                    method, url, wants_post ? "POST" : "GET");
    if (r->route != R_PAGE && !authorised(sv, con))
        return fail(sv, con, r, 401,
                    "this server needs an Authorization: Bearer token");
    if (name) {
        r->model = model_index(sv, name, name_len);
        if (r->model < 0) {
            char known[512];
            list_models(sv, known, sizeof known);
            return fail(sv, con, r, 404,
                        "no model named %.*s: the models served are %s",
                        (int)(name_len > 64 ? 64 : name_len), name, known);
        }
    }
    if (!wants_post)
        return get_route(sv, con, r);
    const char *cl =
        MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > sv->o.max_body)
        return fail(sv, con, r, 413,
                    "the body of %s bytes is above the limit of %zu bytes", cl,
                    sv->o.max_body);
    char mt[64];
    media_type(con, mt, sizeof mt);
    if (r->route == R_CLASSIFY && !classify_media_ok(mt))
        return fail(sv, con, r, 415,
                    "Content-Type %s is not served here: send image/jpeg, "
                    "image/png, application/octet-stream or "
                    "multipart/form-data",
                    mt);
    if (r->route == R_INFER && mt[0] && strcmp(mt, "application/json") != 0)
        return fail(sv, con, r, 415,
                    "Content-Type %s is not served here: send "
                    "application/json (the binary data extension is not "
                    "served)",
                    mt);
    /* From here until its images are queued (or it ends otherwise) the
     * request is on its way to the model's queue. */
    cl_serve_preparing(&sv->models[r->model], 1);
    r->preparing = 1;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    cl_server *sv = cls;
    req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->model = -1;
        r->t0 = cl_serve_now();
        cl_strbuf_init(&r->body);
        *con_cls = r;
        pthread_mutex_lock(&sv->mu);
        sv->in_flight++;
        r->counted = 1;
        pthread_mutex_unlock(&sv->mu);
        return start_request(sv, con, url, method, r);
    }
    /* Answered at its headers (a refusal, or the server draining): the
     * body that still arrives is dropped, and the request is not routed
     * again, since its model may be none. */
    if (r->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        /* libmicrohttpd's timeout is one of inactivity: a client trickling
         * a byte now and then would keep its connection for ever, so the
         * whole body must arrive within 3 timeouts of the headers. */
        if (cl_serve_now() - r->t0 > 3.0 * sv->o.timeout_s)
            return MHD_NO;
        /* Past the limit the rest is read and dropped, so that the client
         * gets its 413 instead of a reset connection. */
        if (!r->too_big && r->body.len + *upload_size > sv->o.max_body) {
            r->too_big = 1;
            cl_strbuf_free(&r->body);
        }
        if (!r->too_big && cl_strbuf_add(&r->body, upload, *upload_size))
            r->too_big = 2;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->too_big == 1)
        return fail(sv, con, r, 413,
                    "the body is above the limit of %zu "
                    "bytes",
                    sv->o.max_body);
    if (r->too_big)
        return fail(sv, con, r, 503, "the server is out of memory");
    return r->route == R_INFER ? infer(sv, con, r) : classify(sv, con, r);
}

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    cl_server *sv = cls;
    req *r = *con_cls;
    if (!r)
        return;
    cl_strbuf_free(&r->body);
    if (r->preparing)
        cl_serve_preparing(&sv->models[r->model], -1);
    if (r->counted) {
        pthread_mutex_lock(&sv->mu);
        if (--sv->in_flight == 0)
            pthread_cond_broadcast(&sv->idle);
        pthread_mutex_unlock(&sv->mu);
    }
    free(r);
    *con_cls = NULL;
}

/* ---------------------------------------------------------- the server */

static cl_status check_opts(const cl_serve_opts *o)
{
    if (o->n_models < 1)
        return cl_error(CL_ERR_ARG, "give at least one --model "
                                    "NAME=CHECKPOINT");
    for (int i = 0; i < o->n_models; i++) {
        const char *nm = o->names[i];
        size_t n = strlen(nm);
        if (n == 0 || n > 63 ||
            strspn(nm, "abcdefghijklmnopqrstuvwxyz"
                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                       "0123456789._-") != n)
            return cl_error(CL_ERR_ARG,
                            "model name '%s' must be 1 to 63 letters, "
                            "digits, '.', '_' or '-'",
                            nm);
        for (int j = 0; j < i; j++)
            if (strcmp(o->names[j], nm) == 0)
                return cl_error(CL_ERR_ARG,
                                "model name '%s' is given "
                                "twice",
                                nm);
    }
    if (o->max_batch < 1 || o->max_batch > 64)
        return cl_error(CL_ERR_ARG, "--max_batch %d: expected 1 to 64",
                        o->max_batch);
    if (o->max_delay_ms < 0 || o->max_delay_ms > 10000)
        return cl_error(CL_ERR_ARG, "--max_delay_ms %d: expected 0 to 10000",
                        o->max_delay_ms);
    if (o->queue < 1 || o->queue > 1000000)
        return cl_error(CL_ERR_ARG, "--queue %d: expected 1 to 1000000",
                        o->queue);
    if (o->port < 0 || o->port > 65535)
        return cl_error(CL_ERR_ARG, "--port %d: expected 0 to 65535", o->port);
    if (o->max_connections < 1 || o->timeout_s < 1 || o->max_body < 1024)
        return cl_error(CL_ERR_ARG,
                        "--max_connections and --timeout_s must be at "
                        "least 1 and --max_body_mb positive");
    return CL_OK;
}

static int is_loopback(const char *host)
{
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "::1") == 0 ||
           strncmp(host, "127.", 4) == 0;
}

cl_status cl_serve_start(cl_server **out, const cl_serve_opts *o)
{
    *out = NULL;
    CL_TRY(check_opts(o));
    const char *host = o->host ? o->host : "127.0.0.1";
    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    int v6 = 0;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)o->port);
        v6 = 1;
    } else {
        return cl_error(CL_ERR_ARG,
                        "--host %s is not a numeric IPv4 or IPv6 "
                        "address",
                        host);
    }
    if (!is_loopback(host) && !o->token && !o->no_auth)
        return cl_error(CL_ERR_ARG,
                        "--host %s serves beyond this machine: give "
                        "--token_file F (a Bearer token) or --no_auth",
                        host);
    cl_server *sv = calloc(1, sizeof *sv);
    if (!sv)
        return cl_error(CL_ERR_NOMEM, "out of memory");
    sv->o = *o;
    sv->o.host = host;
    sv->n = o->n_models;
    pthread_mutex_init(&sv->mu, NULL);
    pthread_cond_init(&sv->idle, NULL);
    sv->models = calloc((size_t)sv->n, sizeof *sv->models);
    sv->names = calloc((size_t)sv->n, sizeof *sv->names);
    cl_status s = !sv->models || !sv->names
                      ? cl_error(CL_ERR_NOMEM, "out of memory")
                      : cl_serve_metrics_init(&sv->metrics, sv->n);
    for (int i = 0; s == CL_OK && i < sv->n; i++) {
        cl_serve_model *m = &sv->models[i];
        snprintf(m->name, sizeof m->name, "%s", o->names[i]);
        sv->names[i] = m->name;
        m->path = o->paths[i];
        m->precision = o->precision;
        m->index = i;
        m->max_batch = o->max_batch;
        m->batch_max = o->batch_max;
        m->cap = o->queue;
        m->max_delay_s = 1e-3 * o->max_delay_ms;
        m->metrics = &sv->metrics;
        s = cl_serve_model_start(m);
        if (s != CL_OK && !m->started) {
            /* Its mutex and condition exist; stop frees them. */
            cl_serve_model_stop(m);
            m->path = NULL;
        }
    }
    if (s != CL_OK) {
        cl_serve_stop(sv);
        return s;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                     MHD_USE_ITC | (v6 ? MHD_USE_IPv6 : 0);
    sv->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, sv,
        MHD_OPTION_SOCK_ADDR,
        v6 ? (struct sockaddr *)&a6 : (struct sockaddr *)&a4,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv, MHD_OPTION_END);
    if (!sv->d) {
        cl_serve_stop(sv);
        return cl_error(CL_ERR_IO,
                        "cannot listen on %s port %d (in use, or not "
                        "an address of this machine)",
                        host, o->port);
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
    sv->port = di ? di->port : o->port;
    *out = sv;
    return CL_OK;
}

int cl_serve_port(const cl_server *s)
{
    return s ? s->port : 0;
}

void cl_serve_describe(cl_server *sv, int i, char *buf, size_t n)
{
    if (n == 0)
        return;
    buf[0] = '\0';
    if (!sv || i < 0 || i >= sv->n)
        return;
    cl_serve_model *m = &sv->models[i];
    cl_serve_gen *g = cl_serve_gen_get(m);
    size_t k = (size_t)snprintf(buf, n,
                                "model %s: precision %s, batches of up to %d "
                                "(max_batch %d; ms per image at",
                                m->name, cl_classifier_precision(g->c),
                                g->batch_cap, m->max_batch);
    for (int j = 0; j < g->n_sizes && k < n; j++)
        k += (size_t)snprintf(buf + k, n - k, "%s %d: %.2f", j ? "," : "",
                              g->sizes[j], g->ms_per_image[j]);
    if (k < n)
        snprintf(buf + k, n - k, ")");
    cl_serve_gen_put(m, g);
}

cl_status cl_serve_reload(cl_server *sv)
{
    cl_serve_gen **g = calloc((size_t)sv->n, sizeof *g);
    if (!g)
        return cl_error(CL_ERR_NOMEM, "out of memory");
    cl_status s = CL_OK;
    for (int i = 0; s == CL_OK && i < sv->n; i++)
        s = cl_serve_gen_open(&sv->models[i], &g[i]);
    for (int i = 0; i < sv->n; i++) {
        if (s == CL_OK)
            cl_serve_model_swap(&sv->models[i], g[i]);
        else if (g[i])
            cl_serve_gen_put(&sv->models[i], g[i]);
    }
    free(g);
    return s;
}

void cl_serve_stop(cl_server *sv)
{
    if (!sv)
        return;
    if (sv->d) {
        /* No new connections; requests on open ones are answered 503, and
         * the requests in flight (queued or running) finish. */
        MHD_socket ls = MHD_quiesce_daemon(sv->d);
        if (ls != MHD_INVALID_SOCKET)
            close(ls);
        pthread_mutex_lock(&sv->mu);
        sv->draining = 1;
        pthread_mutex_unlock(&sv->mu);
        for (int i = 0; i < sv->n; i++)
            cl_serve_model_flush(&sv->models[i]);
        pthread_mutex_lock(&sv->mu);
        while (sv->in_flight > 0)
            pthread_cond_wait(&sv->idle, &sv->mu);
        pthread_mutex_unlock(&sv->mu);
        MHD_stop_daemon(sv->d);
    }
    for (int i = 0; sv->models && i < sv->n; i++)
        if (sv->models[i].path)
            cl_serve_model_stop(&sv->models[i]);
    cl_serve_metrics_free(&sv->metrics);
    pthread_cond_destroy(&sv->idle);
    pthread_mutex_destroy(&sv->mu);
    free(sv->models);
    free(sv->names);
    free(sv);
}
