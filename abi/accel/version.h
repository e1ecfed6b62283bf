/* accel/version.h — ABI version and the rules that let structs grow.
 *
 * Defines: ACCEL_ABI_VERSION_MAJOR/MINOR, AccelAbiVersion, the struct-growth
 * macros (ACCEL_STRUCT_HAS_FIELD, ACCEL_HAS_FN), the extension chain
 * (AccelExtensionBase), the export/linkage macros, and the opaque AccelHost.
 *
 * Invariant (the whole ABI rests on it): a struct that may grow begins with
 * `size_t struct_size`, followed by `AccelExtensionBase* extensions`. Whoever
 * fills a struct sets struct_size = sizeof(T) as its own header declares T.
 * Whoever reads a struct it did not fill reads a field only if the field lies
 * wholly inside that struct_size (ACCEL_STRUCT_HAS_FIELD), and treats a
 * missing field as zero / NULL / "not supported". Sizes are never required to
 * be equal: a 1.0 plugin runs on a 1.3 host and a 1.3 plugin on a 1.0 host.
 * Minor versions only append fields at the end of structs and tables; no
 * struct in the ABI has tail padding (tests/abi asserts it), so an appended
 * field always grows sizeof(T).
 *
 * Arrays of growable structs are always arrays of pointers (`const T* const*`),
 * so a reader never strides an array with its own, possibly different, sizeof.
 *
 * Supported platforms for v1: LP64 (64-bit Linux; size_t and pointers are
 * 8 bytes). Header only; nothing here is thread-sensitive. */
#ifndef ACCEL_ABI_VERSION_H_
#define ACCEL_ABI_VERSION_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------- Version --------------------------------- */

/* The major changes only when an existing field, function or meaning
 * changes; each major has its own entry symbol (see accel/plugin.h). */
#define ACCEL_ABI_VERSION_MAJOR 1
/* The minor changes when fields, functions, enum values or flags are
 * appended; every minor has one line in abi/CHANGELOG.md. */
#define ACCEL_ABI_VERSION_MINOR 15

/* A version pair. Frozen: it never grows, so it carries no struct_size. */
typedef struct AccelAbiVersion {
  uint32_t major;
  uint32_t minor;
} AccelAbiVersion;

/* ---------------------------- Struct growth ------------------------------ */

/* Byte offset one past `field` in `type`: the struct_size a reader needs to
 * see before it may read `field`. */
#define ACCEL_FIELD_END(type, field) \
  (offsetof(type, field) + sizeof(((type*)0)->field))

/* True when `ptr` (a `const type*`, may be NULL) was filled by a side whose
 * `type` already had `field`. Use it before reading a field the other side
 * filled when the field was appended after the struct was introduced: a
 * struct_size is never smaller than the struct's size in the minor that
 * introduced it (the host refuses a plugin whose descriptor, hook table or
 * option specs are smaller, and never passes smaller structs itself), so the
 * fields of 1.0 structs may be read by any 1.x reader without the check.
 * There is no exception: a plugin's hook table (AccelHooks) is at least
 * 1.0's, which ends at trace_event. Hooks a later minor appends lie past a
 * 1.0 plugin's struct_size and read as NULL ("not mine") — that is how a
 * plugin built against 1.0 runs on a host whose table gained hooks. */
#define ACCEL_STRUCT_HAS_FIELD(ptr, type, field) \
  ((ptr) != NULL && (ptr)->struct_size >= ACCEL_FIELD_END(type, field))

/* True when the function-pointer `field` of table `ptr` exists on the other
 * side and is non-NULL. A NULL function pointer means "not supported"
 * (services) or "not mine" (plugin hooks). */
#define ACCEL_HAS_FN(ptr, type, field) \
  (ACCEL_STRUCT_HAS_FIELD(ptr, type, field) && (ptr)->field != NULL)

/* ---------------------------- Extension chain ---------------------------- */

/* A singly linked list of optional, named structs, hung off any growable
 * struct's `extensions` field. It carries capabilities that are not part of
 * the core ABI (a strategy-specific service, a vendor's tuning knob) without
 * a new ABI version. A reader walks the list, matches `name`, checks
 * `struct_size` like any other struct, and skips every name it does not know.
 * Names are dotted and namespaced ("com.example.my_feature"); the prefix
 * "accel." is reserved for extensions defined by this project.
 * Ownership: the list and its nodes belong to whoever filled the struct that
 * holds it, and live exactly as long as that struct. */
typedef struct AccelExtensionBase {
  size_t struct_size;               /* sizeof the concrete extension struct */
  const char* name;                 /* NUL-terminated, namespaced, not NULL */
  uint32_t version;                 /* the extension's own version, from 1 */
  uint32_t reserved;                /* must be 0 */
  struct AccelExtensionBase* next;  /* next node, NULL at the end */
} AccelExtensionBase;

/* Returns the first node of the chain `head` named `name`, or NULL. */
static inline AccelExtensionBase* accel_find_extension(
    AccelExtensionBase* head, const char* name) {
  for (; head != NULL; head = head->next) {
    const char* a = head->name;
    const char* b = name;
    if (a == NULL || b == NULL) continue;
    while (*a != '\0' && *a == *b) { ++a; ++b; }
    if (*a == *b) return head;
  }
  return NULL;
}

/* ------------------------------- Linkage --------------------------------- */

/* Marks the plugin's entry symbol as exported. Plugins build with
 * -fvisibility=hidden and export nothing but their entry symbol(s). */
#if defined(__GNUC__) || defined(__clang__)
#define ACCEL_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define ACCEL_PLUGIN_EXPORT
#endif

#ifdef __cplusplus
#define ACCEL_EXTERN_C extern "C"
#else
#define ACCEL_EXTERN_C
#endif

/* -------------------------------- Host ----------------------------------- */

/* The host as one plugin sees it: an opaque handle, one per loaded plugin,
 * passed as the first argument to every service. It tells the host which
 * plugin is calling (for error messages, log prefixes, memory accounting).
 * Owned by the host; valid from the plugin's entry call until its teardown
 * hook returned. Never dereferenced by a plugin. */
typedef struct AccelHost AccelHost;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ACCEL_ABI_VERSION_H_ */
