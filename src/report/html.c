/* Text helpers of the HTML report: escaping, base64, PNG encoding into
 * memory (for data: URIs) and number formatting. */
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "report/report_internal.h"

cl_status cl__html_escn(cl_strbuf *b, const char *s, size_t n)
{
    size_t run = 0; /* bytes copied as they are, flushed in one append */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *rep = NULL;
        switch (c) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&quot;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        default:
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)
                rep = "\xef\xbf\xbd"; /* U+FFFD */
        }
        if (!rep) {
            run++;
            continue;
        }
        CL_TRY(cl_strbuf_add(b, s + i - run, run));
        run = 0;
        CL_TRY(cl_strbuf_adds(b, rep));
    }
    return cl_strbuf_add(b, s + n - run, run);
}

cl_status cl__html_esc(cl_strbuf *b, const char *s)
{
    return cl__html_escn(b, s ? s : "", s ? strlen(s) : 0);
}

cl_status cl__base64(cl_strbuf *b, const uint8_t *d, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              "abcdefghijklmnopqrstuvwxyz0123456789+/";
    CL_TRY(cl_strbuf_reserve(b, (n + 2) / 3 * 4));
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)d[i + 1] << 8;
        if (i + 2 < n)
            v |= d[i + 2];
        char q[4] = {tab[v >> 18 & 63], tab[v >> 12 & 63],
                     i + 1 < n ? tab[v >> 6 & 63] : '=',
                     i + 2 < n ? tab[v & 63] : '='};
        CL_TRY(cl_strbuf_add(b, q, 4));
    }
    return CL_OK;
}

typedef struct png_sink {
    cl_strbuf *b;
    char msg[160];
} png_sink;

static void sink_write(png_structp png, png_bytep data, png_size_t n)
{
    png_sink *k = png_get_io_ptr(png);
    if (cl_strbuf_add(k->b, data, n) != CL_OK)
        png_error(png, "out of memory");
}

static void sink_flush(png_structp png)
{
    (void)png;
}

static void sink_error(png_structp png, png_const_charp msg)
{
    png_sink *k = png_get_error_ptr(png);
    snprintf(k->msg, sizeof k->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void sink_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

cl_status cl__png_encode(cl_strbuf *b, const uint8_t *pix, int h, int w, int c)
{
    if ((c != 1 && c != 3) || h < 1 || w < 1)
        return cl_error(CL_ERR_ARG, "PNG: cannot encode %dx%dx%d", h, w, c);
    png_sink k = {b, ""};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &k,
                                              sink_error, sink_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, NULL);
        return cl_error(CL_ERR_NOMEM, "PNG: cannot create a writer");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return cl_error(CL_ERR_FORMAT, "PNG: encoding failed: %s", k.msg);
    }
    png_set_write_fn(png, &k, sink_write, sink_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
                 c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    const size_t stride = (size_t)w * (size_t)c;
    for (int y = 0; y < h; y++)
        png_write_row(png, (png_const_bytep)(pix + (size_t)y * stride));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return CL_OK;
}

void cl__fmt_num(char *buf, size_t n, double v, int digits)
{
    double a = fabs(v);
    if (!isfinite(v))
        snprintf(buf, n, "\xe2\x80\x93"); /* en dash */
    else if (a != 0 && (a < 1e-3 || a >= 1e6)) {
        /* 1.5e-04 -> 1.5e-4: shorter and how lrs are usually written. */
        char t[48];
        snprintf(t, sizeof t, "%.*e", digits > 1 ? digits - 1 : 0, v);
        char *e = strchr(t, 'e');
        if (e) {
            char *m = e - 1;
            while (m > t && *m == '0')
                m--;
            if (*m == '.')
                m--;
            int ex = atoi(e + 1);
            snprintf(buf, n, "%.*se%d", (int)(m - t + 1), t, ex);
        } else {
            snprintf(buf, n, "%s", t);
        }
    } else {
        snprintf(buf, n, "%.*g", digits, v);
    }
}
