/* Bare-metal start-up for the QEMU mps2 boards the exporter tests run bundles on (Cortex-M0/M4/M7/M33).
 *
 * Why it exists: the bundle under test is linked into a program of our own, with no vendor SDK. This file
 * is the whole run-time: the vector table, the reset handler (copy .data, zero .bss, enable the FPU,
 * open the semihosting handles, call main, exit with its status), a SysTick handler that counts timer
 * wraps for the instruction counter, and fault handlers that report over semihosting and stop QEMU with
 * a failure status instead of hanging.
 */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __stack_top;
extern uint32_t __data_load, __data_start, __data_end, __bss_start, __bss_end;
extern int main(void);
extern void initialise_monitor_handles(void);

/* newlib's crt0 is left out (-nostartfiles) but its libc still references these. */
void _init(void) {}
void _fini(void) {}

volatile uint32_t systick_wraps;

void SysTick_Handler(void) { systick_wraps++; }

/* Semihosting calls made directly, so a fault report does not depend on the C library's state. */
static void semihost(uint32_t op, const void *arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
}

#define SYS_WRITE0 0x04u
#define SYS_EXIT 0x18u
#define ADP_STOPPED_RUNTIME_ERROR 0x20023u

static void fail(const char *message)
{
    semihost(SYS_WRITE0, message);
    semihost(SYS_EXIT, (const void *)ADP_STOPPED_RUNTIME_ERROR);
    for (;;) {
    }
}

void HardFault_Handler(void) { fail("@fault HardFault\n"); }
void MemManage_Handler(void) { fail("@fault MemManage\n"); }
void BusFault_Handler(void) { fail("@fault BusFault\n"); }
void UsageFault_Handler(void) { fail("@fault UsageFault\n"); }
void SecureFault_Handler(void) { fail("@fault SecureFault\n"); }
void Default_Handler(void) { fail("@fault unexpected interrupt\n"); }

static void enable_fpu(void)
{
#if defined(__ARM_FP)
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20; /* full access to CP10 and CP11 */
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif
}

void Reset_Handler(void)
{
    uint32_t *src = &__data_load;
    for (uint32_t *dst = &__data_start; dst < &__data_end;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = &__bss_start; dst < &__bss_end;) {
        *dst++ = 0;
    }
    enable_fpu();
    initialise_monitor_handles();
    exit(main());
}

typedef void (*vector_t)(void);

__attribute__((section(".vectors"), used)) const vector_t vector_table[16] = {
    (vector_t)&__stack_top,
    Reset_Handler,
    Default_Handler,     /* NMI */
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    SecureFault_Handler, /* v8-M only; reserved elsewhere */
    0, 0, 0,
    Default_Handler,     /* SVCall */
    Default_Handler,     /* DebugMonitor */
    0,
    Default_Handler,     /* PendSV */
    SysTick_Handler,
};
