// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Stack sampling on perf events: one program per event kind, attached to a perf event per CPU
 * (cpu-clock for `cpu`, the software page-fault event for `page_fault`, hardware events where
 * a PMU exists). Samples are counted in kernel maps keyed by thread, event and stacks; user
 * space drains them every interval.
 *
 * Two sample maps are used in turn: programs count into `samples_0` or `samples_1` as
 * `active_buffer` says, and user space flips it before draining the other one, so a drain
 * never races with the counting it reads.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "sample.h"

/* vmlinux.h carries no errno values */
#define EFAULT 14

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sample counts per key while `active_buffer` is 0; entries are sized by user space */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples_0 SEC(".maps");

/* sample counts per key while `active_buffer` is 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples_1 SEC(".maps");

/* stack traces (instruction pointers, leaf first) by id; user space deletes read ids */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/* lost samples and stacks per event kind and drop reason, per CPU so counting never contends */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROPS_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* only sample this process (tgid); 0 samples every process */
const volatile __u32 filter_tgid = 0;

/* which sample map programs count into; flipped by user space before each drain */
__u32 active_buffer = 0;

/* emit the shared types into BTF so the skeleton carries them to Rust */
struct sample_key _sample_key = {};
enum event_kind _event_kind = 0;
enum drop_reason _drop_reason = 0;

static __always_inline void count_drop(enum event_kind event, enum drop_reason reason)
{
	__u32 index = event * DROP_REASON_COUNT + reason;
	__u64 *n = bpf_map_lookup_elem(&drops, &index);

	if (n)
		*n += 1;
}

static __always_inline int record_sample(void *ctx, enum event_kind event)
{
	struct sample_key key = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u64 one = 1, *count;
	void *samples;

	key.tgid = id >> 32;
	key.pid = (__u32)id;
	/* the idle task is not work anybody can optimize */
	if (key.pid == 0)
		return 0;
	if (filter_tgid && key.tgid != filter_tgid)
		return 0;

	key.event = event;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));

	/* kernel threads have no user stack: -EFAULT is expected there, not a loss */
	key.user_stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (key.user_stack_id < 0 && key.user_stack_id != -EFAULT)
		count_drop(event, DROP_USER_STACK);
	/* a sample taken in user mode has no kernel stack: -EFAULT again */
	key.kernel_stack_id = bpf_get_stackid(ctx, &stacks, 0);
	if (key.kernel_stack_id < 0 && key.kernel_stack_id != -EFAULT)
		count_drop(event, DROP_KERNEL_STACK);

	samples = active_buffer ? (void *)&samples_1 : (void *)&samples_0;
	count = bpf_map_lookup_elem(samples, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	if (bpf_map_update_elem(samples, &key, &one, BPF_NOEXIST)) {
		/* another CPU may have inserted the key meanwhile */
		count = bpf_map_lookup_elem(samples, &key);
		if (count)
			__sync_fetch_and_add(count, 1);
		else
			count_drop(event, DROP_SAMPLE_MAP_FULL);
	}
	return 0;
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_CPU);
}

SEC("perf_event")
int sample_page_fault(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_PAGE_FAULT);
}

SEC("perf_event")
int sample_cache_miss(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_CACHE_MISS);
}

SEC("perf_event")
int sample_remote_access(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_REMOTE_ACCESS);
}
