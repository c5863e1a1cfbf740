/* Test harness that runs one Glow bundle once: the program the exporter tests link a NAME.o into.
 *
 * Why it exists: to check a bundle the way a user's application calls it — through the macros of NAME.h
 * and the entry point, with the three memory regions declared statically and GLOW_MEM_ALIGN'ed — on every
 * toolchain (host gcc, aarch64 Linux under qemu-aarch64, bare-metal Cortex-M under qemu-system-arm).
 *
 * pegasus/exporters/glow/run/toolchains.py generates harness_config.h for each bundle: it includes NAME.h and names
 * the entry, the region sizes and, as X-macros, each input and output placeholder's offset macro and size.
 *
 * Two ways in and out:
 *  - hosted (default): `prog WEIGHTS.bin INPUTS.bin OUTPUTS.bin` reads the weights file and the inputs
 *    (concatenated in placeholder order) and writes the outputs (concatenated) raw.
 *  - HARNESS_BARE_METAL: weights and inputs are linked in (harness_weights / harness_inputs, from the
 *    generated .incbin file); the weights are used in place, from flash. Outputs are printed over
 *    semihosting as hex bytes ("@out INDEX" then lines of hex), and the SysTick ticks spent in the entry
 *    call as "@ticks HEX" (under `qemu -icount shift=0`: instructions / 40 at 25 MHz, / 50 at 20 MHz),
 *    and the stack the entry call used as "@stack HEX" (bytes): the 48 KB below the caller's stack pointer
 *    are painted with a pattern before the call and scanned after it for the deepest overwritten word.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness_config.h"

#define NONZERO(n) ((n) > 0 ? (n) : 1)

struct slot {
    uint32_t offset;
    uint32_t size;
};

#define HARNESS_SLOT(offset, size) {(offset), (size)},
static const struct slot inputs[] = {HARNESS_INPUTS(HARNESS_SLOT){0, 0}};
static const struct slot outputs[] = {HARNESS_OUTPUTS(HARNESS_SLOT){0, 0}};
#define INPUT_COUNT (sizeof(inputs) / sizeof(inputs[0]) - 1)
#define OUTPUT_COUNT (sizeof(outputs) / sizeof(outputs[0]) - 1)

GLOW_MEM_ALIGN(HARNESS_MEM_ALIGN)
static uint8_t mutable_mem[NONZERO(HARNESS_MUTABLE_SIZE)];
GLOW_MEM_ALIGN(HARNESS_MEM_ALIGN)
static uint8_t activations_mem[NONZERO(HARNESS_ACTIVATIONS_SIZE)];

static void report_error(const char *message);

static int slots_fit(const struct slot *slots, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if ((uint64_t)slots[i].offset + slots[i].size > HARNESS_MUTABLE_SIZE) {
            report_error("a placeholder lies outside the mutable region");
            return 0;
        }
    }
    return 1;
}

static void scatter_inputs(const uint8_t *blob)
{
    for (size_t i = 0; i < INPUT_COUNT; i++) {
        memcpy(GLOW_GET_ADDR(mutable_mem, inputs[i].offset), blob, inputs[i].size);
        blob += inputs[i].size;
    }
}

#if defined(HARNESS_BARE_METAL)

extern const uint8_t harness_weights[], harness_weights_end[];
extern const uint8_t harness_inputs[];
extern volatile uint32_t systick_wraps;

#define SYST_CSR (*(volatile uint32_t *)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t *)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t *)0xE000E018u)
#define SYST_RELOAD 0xFFFFFFu

/* SysTick on the processor clock, wrapping every 2^24 ticks; the interrupt counts the wraps. */
static void systick_start(void)
{
    SYST_RVR = SYST_RELOAD;
    SYST_CVR = 0;
    SYST_CSR = 0x7u; /* CLKSOURCE = processor clock, TICKINT, ENABLE */
}

/* Ticks since systick_start. The counter runs RELOAD, ..., 1, 0, RELOAD, ...; a read of 0 (just enabled,
 * or the tick of a wrap, where the wrap count may or may not have moved yet) is ambiguous, so it is read
 * again: that costs at most one tick and leaves the count monotonic and repeatable. */
static uint64_t systick_now(void)
{
    uint32_t wraps, value;
    do {
        wraps = systick_wraps;
        value = SYST_CVR;
    } while (value == 0 || wraps != systick_wraps);
    return ((uint64_t)wraps << 24) + (SYST_RELOAD - value);
}

static void put_hex(const uint8_t *bytes, size_t count)
{
    static const char digits[] = "0123456789abcdef";
    char line[2 * 64 + 2];
    while (count > 0) {
        size_t chunk = count < 64 ? count : 64;
        for (size_t i = 0; i < chunk; i++) {
            line[2 * i] = digits[bytes[i] >> 4];
            line[2 * i + 1] = digits[bytes[i] & 0xF];
        }
        line[2 * chunk] = '\n';
        line[2 * chunk + 1] = '\0';
        fputs(line, stdout);
        bytes += chunk;
        count -= chunk;
    }
}

/* Bare metal: everything, errors included, goes to semihosting stdout (no printf: keeps the program small). */
static void report_error(const char *message)
{
    fputs("@error ", stdout);
    fputs(message, stdout);
    fputs("\n", stdout);
}

static void put_tagged_u64(const char *tag, uint64_t value)
{
    uint8_t big_endian[8];
    for (int i = 0; i < 8; i++) {
        big_endian[i] = (uint8_t)(value >> (56 - 8 * i));
    }
    fputs(tag, stdout);
    put_hex(big_endian, sizeof big_endian);
}

#define STACK_PAINT 0x5AC4C0DEu
#define STACK_PROBE_WORDS (48u * 1024u / 4u) /* below the 64 KB the linker script reserves for the stack */

static inline uintptr_t stack_pointer(void)
{
    uintptr_t sp;
    __asm__ volatile("mov %0, sp" : "=r"(sp));
    return sp;
}

/* Paints the words below `sp` (free stack: nothing lives there until the next call). */
static void __attribute__((noinline)) paint_stack(uintptr_t sp)
{
    volatile uint32_t *word = (volatile uint32_t *)(sp & ~(uintptr_t)3u) - STACK_PROBE_WORDS;
    /* this function's own frame sits just below sp: start painting under it */
    for (uint32_t i = 0; i < STACK_PROBE_WORDS - 16u; i++) {
        word[i] = STACK_PAINT;
    }
}

/* Bytes between `sp` and the deepest painted word that is no longer the pattern. */
static uint32_t stack_used(uintptr_t sp)
{
    const volatile uint32_t *word = (const volatile uint32_t *)(sp & ~(uintptr_t)3u) - STACK_PROBE_WORDS;
    uint32_t i = 0;
    while (i < STACK_PROBE_WORDS - 16u && word[i] == STACK_PAINT) {
        i++;
    }
    return (STACK_PROBE_WORDS - i) * 4u;
}

#if defined(HARNESS_PROBES)
/* --profile: the instrumented bundle calls pegasus_probe(i) before layer i and after the last one; each
 * call records the SysTick count. Calls with index HARNESS_PROBES calibrate the probe's own cost. */
static uint64_t probe_ticks[HARNESS_PROBES + 1];

#if defined(HARNESS_DUMPS)
/* --compare-layers: at probe i, print the outputs of layer i - 1 (region 0: mutable, 1: activations). */
struct dump {
    int32_t probe;
    uint32_t region, offset, size;
};
#define HARNESS_DUMP_ENTRY(probe, region, offset, size) {(probe), (region), (offset), (size)},
static const struct dump dumps[] = {HARNESS_DUMPS(HARNESS_DUMP_ENTRY){-1, 0, 0, 0}};
#endif

void __attribute__((noinline)) pegasus_probe(int32_t index, uint8_t *mutable_base, uint8_t *activations_base)
{
    probe_ticks[(uint32_t)index <= HARNESS_PROBES ? (uint32_t)index : HARNESS_PROBES] = systick_now();
#if defined(HARNESS_DUMPS)
    for (size_t i = 0; dumps[i].probe >= 0; i++) {
        if (dumps[i].probe == index) {
            put_tagged_u64("@layer ", i);
            put_hex((dumps[i].region ? activations_base : mutable_base) + dumps[i].offset, dumps[i].size);
        }
    }
#else
    (void)mutable_base;
    (void)activations_base;
#endif
}

#define PROBE_CALIBRATION_CALLS 1000u

static void report_probes(void)
{
    systick_start();
    uint64_t start = systick_now();
    for (uint32_t i = 0; i < PROBE_CALIBRATION_CALLS; i++) {
        pegasus_probe(HARNESS_PROBES, mutable_mem, activations_mem);
    }
    put_tagged_u64("@calibration ", systick_now() - start);
    for (uint32_t i = 0; i < HARNESS_PROBES; i++) {
        put_tagged_u64("@probe ", probe_ticks[i]);
    }
}
#endif

int main(void)
{
    if ((size_t)(harness_weights_end - harness_weights) != HARNESS_CONSTANT_SIZE) {
        report_error("embedded weights differ in size from CONSTANT_MEM_SIZE");
        return 2;
    }
    if (!slots_fit(inputs, INPUT_COUNT) || !slots_fit(outputs, OUTPUT_COUNT)) {
        return 2;
    }
    scatter_inputs(harness_inputs);
    uintptr_t sp = stack_pointer();
    paint_stack(sp);
    systick_start();
    uint64_t start = systick_now();
    int status = HARNESS_ENTRY((uint8_t *)harness_weights, mutable_mem, activations_mem);
    uint64_t stop = systick_now();
    uint32_t stack = stack_used(sp);
    for (size_t i = 0; i < OUTPUT_COUNT; i++) {
        put_tagged_u64("@out ", i);
        put_hex(GLOW_GET_ADDR(mutable_mem, outputs[i].offset), outputs[i].size);
    }
    put_tagged_u64("@ticks ", stop - start);
    put_tagged_u64("@stack ", stack);
#if defined(HARNESS_PROBES)
    report_probes();
#endif
    fflush(stdout);
    return status;
}

#else /* hosted */

GLOW_MEM_ALIGN(HARNESS_MEM_ALIGN)
static uint8_t constant_mem[NONZERO(HARNESS_CONSTANT_SIZE)];
static uint8_t input_blob[NONZERO(HARNESS_MUTABLE_SIZE)];

static void report_error(const char *message) { fprintf(stderr, "@error %s\n", message); }

/* Reads exactly `size` bytes (and no more) from `path` into `buffer`. */
static int read_exactly(const char *path, uint8_t *buffer, size_t size)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        fprintf(stderr, "@error cannot open %s\n", path);
        return 0;
    }
    size_t got = fread(buffer, 1, size, file);
    int extra = fgetc(file);
    fclose(file);
    if (got != size || extra != EOF) {
        fprintf(stderr, "@error %s does not hold exactly %lu bytes\n", path, (unsigned long)size);
        return 0;
    }
    return 1;
}

static size_t total_size(const struct slot *slots, size_t count)
{
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        total += slots[i].size;
    }
    return total;
}

static int write_outputs(const char *path)
{
    FILE *file = fopen(path, "wb");
    if (file == NULL) {
        fprintf(stderr, "@error cannot create %s\n", path);
        return 0;
    }
    int ok = 1;
    for (size_t i = 0; i < OUTPUT_COUNT; i++) {
        ok &= fwrite(GLOW_GET_ADDR(mutable_mem, outputs[i].offset), 1, outputs[i].size, file) == outputs[i].size;
    }
    return fclose(file) == 0 && ok;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s WEIGHTS.bin INPUTS.bin OUTPUTS.bin\n", argv[0]);
        return 2;
    }
    if (!slots_fit(inputs, INPUT_COUNT) || !slots_fit(outputs, OUTPUT_COUNT)) {
        return 2;
    }
    if (!read_exactly(argv[1], constant_mem, HARNESS_CONSTANT_SIZE) ||
        !read_exactly(argv[2], input_blob, total_size(inputs, INPUT_COUNT))) {
        return 2;
    }
    scatter_inputs(input_blob);
    int status = HARNESS_ENTRY(constant_mem, mutable_mem, activations_mem);
    if (status != 0) {
        fprintf(stderr, "@error entry returned %d\n", status);
        return status;
    }
    return write_outputs(argv[3]) ? 0 : 2;
}

#endif
