/* The table of configuration keys (io/config_keys.c) as io/config.c reads
 * it to default, parse, check, write and list them; private to the two. */
#ifndef CL_IO_CONFIG_KEYS_H
#define CL_IO_CONFIG_KEYS_H

#include <stddef.h>

typedef enum ktype {
    T_INT,
    T_FLOAT,
    T_BOOL,
    T_STR,
    T_ENUM,
    T_FLOATS,
    T_INTS
} ktype;

typedef struct key {
    const char *name;
    ktype type;
    size_t off;   /* the field */
    size_t n_off; /* lists: the count field */
    int cap;      /* strings: buffer size; lists: most entries */
    int min_n;    /* lists: fewest entries */
    double min, max;
    int min_open, max_open;    /* exclusive bounds */
    const char *const *values; /* enums: NULL-terminated names */
    const char *def;           /* the default, written as in YAML */
    const char *alias;         /* mindcv's name when it differs */
    const char *hint;          /* appended to range errors */
    const char *help;
} key;

/* A max that bounds nothing (ranges print as ">= min"). */
#define CL__CFG_NO_MAX 1e300
/* The most rows (keys and group headings) the table may hold. */
#define CL__CFG_MAX_ROWS 256

/* The rows: a key, or a group heading (name NULL, help the title). */
extern const key cl__config_keys[];
extern const int cl__config_nkeys;
/* Other spellings of enum values (mindcv's), as {key, spelling, value}. */
extern const char *const cl__config_value_aliases[][3];
extern const int cl__config_nvalue_aliases;
/* Names from other frameworks, {theirs, ours}: suggested, never taken. */
extern const char *const cl__config_synonyms[][2];
extern const int cl__config_nsynonyms;

#endif
