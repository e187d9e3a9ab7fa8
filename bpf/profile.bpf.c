// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Stack sampling for every event kind, counted in kernel maps keyed by thread, event and stacks;
 * user space drains them every interval.
 *
 * Sources, one program each, chosen and attached by the agent per machine:
 *  - perf events (cpu-clock, page faults, hardware PMU events) on every CPU;
 *  - task_numa_fault, by fentry or kprobe, for NUMA-balancing hinting faults and the remote
 *    ones among them (remote_access where no PMU counts remote accesses);
 *  - the mm_migrate_pages raw tracepoint for page migrations.
 * Beside them, exec and exit of processes keep `sampled_processes` true (which processes the
 * agent has been told of).
 *
 * Two sample maps are used in turn: programs count into `samples_0` or `samples_1` as
 * `active_buffer` says, and user space flips it before draining the other one, so a drain
 * never races with the counting it reads.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sample.h"

/* vmlinux.h carries no errno values */
#define EFAULT 14

/* task_numa_fault() flags (include/linux/sched/numa_balancing.h, stable since 3.13) */
#define TNF_FAULT_LOCAL 0x08

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* sample counts per key while `active_buffer` is 0; entries are sized by user space */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, struct sample_value);
} samples_0 SEC(".maps");

/* sample counts per key while `active_buffer` is 1 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sample_key);
	__type(value, struct sample_value);
} samples_1 SEC(".maps");

/* stack traces (instruction pointers, leaf first) by id; user space deletes read ids */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

/* samples with a data address (struct data_sample), read by user space at every drain */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} data_samples SEC(".maps");

/* samples with a user stack copy (struct stack_snapshot), read continuously by the agent */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 * 1024 * 1024);
} stack_snapshots SEC(".maps");

/*
 * Processes sampled since they started or last called exec, by tgid, with what the agent knows
 * of them (enum process_state). The first sample of any other process sends its tgid through
 * `new_processes`, and the agent reads its mappings and judges its frame pointers at once, while
 * it still runs: a process that lives less than a drain interval is named and unwound like any
 * other. LRU: a process forgotten early is only noticed (and judged) again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} sampled_processes SEC(".maps");

/* tgids (__u32) of processes sampled for the first time, read continuously by the agent */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} new_processes SEC(".maps");

/* lost samples and stacks per event kind and drop reason, per CPU so counting never contends */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROPS_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* only sample this process (tgid); 0 samples every process */
const volatile __u32 filter_tgid = 0;

/* never sample this process: the agent itself, whose own symbolizing would feed back */
const volatile __u32 skip_tgid = 0;

/* event kinds to record, one bit per enum event_kind: a shared program may serve several */
const volatile __u32 enabled_events = 0;

/* send data addresses of samples that have one through `data_samples` */
const volatile bool send_data_addresses = false;

/* send a stack snapshot for every process with a user stack (`eh-frame` unwinding) */
const volatile bool unwind_all = false;

/*
 * send a stack snapshot for processes the agent judged to lack frame pointers, and for those it
 * has not judged yet (`auto` unwinding)
 */
const volatile bool unwind_auto = false;

/* which sample map programs count into; flipped by user space before each drain */
__u32 active_buffer = 0;

/* emit the shared types into BTF so the skeleton carries them to Rust */
enum process_state _process_state = 0;
struct sample_key _sample_key = {};
struct sample_value _sample_value = {};
struct data_sample _data_sample = {};
struct stack_snapshot _stack_snapshot = {};
enum event_kind _event_kind = 0;
enum drop_reason _drop_reason = 0;

static __always_inline void count_drop(enum event_kind event, enum drop_reason reason)
{
	__u32 index = event * DROP_REASON_COUNT + reason;
	__u64 *n = bpf_map_lookup_elem(&drops, &index);

	if (n)
		*n += 1;
}

/*
 * What the agent knows of process `tgid` (enum process_state); at its first sample, tells the
 * agent about it (see `sampled_processes`).
 */
static __always_inline __u8 process_state(__u32 tgid)
{
	__u8 noticed = PROCESS_NOTICED, *state;
	__u32 *out;

	state = bpf_map_lookup_elem(&sampled_processes, &tgid);
	if (state)
		return *state;
	/* another CPU may have noticed it meanwhile: only the one that inserted it sends */
	if (bpf_map_update_elem(&sampled_processes, &tgid, &noticed, BPF_NOEXIST))
		return PROCESS_NOTICED;
	out = bpf_ringbuf_reserve(&new_processes, sizeof(*out), 0);
	if (!out) {
		/* noticed again at its next sample, when the agent has read the ring */
		bpf_map_delete_elem(&sampled_processes, &tgid);
		return PROCESS_NOTICED;
	}
	*out = tgid;
	bpf_ringbuf_submit(out, 0);
	return PROCESS_NOTICED;
}

/*
 * Sends the sample of a process with a user stack (its kernel stack already taken) with the user
 * registers and a copy of the user stack, to be unwound by the agent. False when it could not, and
 * the caller should count it with a frame-pointer user stack.
 */
static __always_inline bool send_snapshot(struct sample_key *key, __u64 weight, __u64 address)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct stack_snapshot *snap;
	struct pt_regs *regs;
	__u64 sp, len, chunk;
	int i;

	snap = bpf_ringbuf_reserve(&stack_snapshots, sizeof(*snap), 0);
	if (!snap) {
		count_drop(key->event, DROP_SNAPSHOT_RING_FULL);
		return false;
	}
	/* the user registers saved at the last entry to the kernel: the sample's, in user mode */
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	snap->ip = BPF_CORE_READ(regs, ip);
	snap->sp = BPF_CORE_READ(regs, sp);
	snap->bp = BPF_CORE_READ(regs, bp);
	snap->tgid = key->tgid;
	snap->pid = key->pid;
	snap->event = key->event;
	snap->kernel_stack_id = key->kernel_stack_id;
	snap->weight = weight;
	snap->address = send_data_addresses ? address : 0;
	__builtin_memcpy(snap->comm, key->comm, sizeof(snap->comm));

	/*
	 * Page by page, so a stack ending (the top of the mapping) a few bytes above sp still
	 * gives what lies below the end: first the rest of sp's page, then whole pages.
	 */
	sp = snap->sp;
	chunk = ((SNAPSHOT_PAGE_SIZE - 1) & ~sp) + 1;
	len = 0;
	if (bpf_probe_read_user(snap->stack, chunk, (void *)sp) == 0) {
		len = chunk;
		for (i = 0; i < SNAPSHOT_STACK_PAGES; i++) {
			if (len > SNAPSHOT_STACK_SIZE - SNAPSHOT_PAGE_SIZE)
				break;
			if (bpf_probe_read_user(snap->stack + len, SNAPSHOT_PAGE_SIZE,
						(void *)(sp + len)))
				break;
			len += SNAPSHOT_PAGE_SIZE;
		}
	}
	snap->stack_len = len;
	bpf_ringbuf_submit(snap, 0);
	return true;
}

/* counts one sample of `event` standing for `weight` events, with the current stacks */
static __always_inline int record_sample(void *ctx, enum event_kind event, __u64 weight,
					 __u64 address)
{
	struct sample_key key = {};
	struct sample_value first = {.count = 1, .value = weight}, *value;
	struct data_sample *data;
	__u64 id = bpf_get_current_pid_tgid();
	__u8 state = PROCESS_NOTICED;
	bool user;
	void *samples;

	key.tgid = id >> 32;
	key.pid = (__u32)id;
	/* the idle task is not work anybody can optimize */
	if (key.pid == 0)
		return 0;
	if (filter_tgid && key.tgid != filter_tgid)
		return 0;
	if (key.tgid == skip_tgid)
		return 0;

	if (!(enabled_events & (1u << event)))
		return 0;
	key.event = event;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	/* kernel threads map no files and have no user stack: nothing to tell or unwind */
	user = BPF_CORE_READ((struct task_struct *)bpf_get_current_task_btf(), mm);
	if (user)
		state = process_state(key.tgid);

	/* a sample taken in user mode has no kernel stack: -EFAULT is expected there, not a loss */
	key.kernel_stack_id = bpf_get_stackid(ctx, &stacks, 0);
	if (key.kernel_stack_id < 0 && key.kernel_stack_id != -EFAULT)
		count_drop(event, DROP_KERNEL_STACK);

	if (user && (unwind_all || (unwind_auto && state != PROCESS_FRAME_POINTERS)) &&
	    send_snapshot(&key, weight, address))
		return 0;

	/* kernel threads have no user stack: -EFAULT again */
	key.user_stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (key.user_stack_id < 0 && key.user_stack_id != -EFAULT)
		count_drop(event, DROP_USER_STACK);

	samples = active_buffer ? (void *)&samples_1 : (void *)&samples_0;
	value = bpf_map_lookup_elem(samples, &key);
	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		__sync_fetch_and_add(&value->value, weight);
	} else if (bpf_map_update_elem(samples, &key, &first, BPF_NOEXIST)) {
		/* another CPU may have inserted the key meanwhile */
		value = bpf_map_lookup_elem(samples, &key);
		if (value) {
			__sync_fetch_and_add(&value->count, 1);
			__sync_fetch_and_add(&value->value, weight);
		} else {
			count_drop(event, DROP_SAMPLE_MAP_FULL);
			return 0;
		}
	}

	if (!address || !send_data_addresses)
		return 0;
	data = bpf_ringbuf_reserve(&data_samples, sizeof(*data), 0);
	if (!data) {
		count_drop(event, DROP_DATA_RING_FULL);
		return 0;
	}
	data->tgid = key.tgid;
	data->pid = key.pid;
	data->event = event;
	data->user_stack_id = key.user_stack_id;
	data->address = address;
	data->weight = weight;
	bpf_ringbuf_submit(data, 0);
	return 0;
}

/* perf events: the period comes with every sample, the data address where the event has one */

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_CPU, ctx->sample_period, 0);
}

SEC("perf_event")
int sample_page_fault(struct bpf_perf_event_data *ctx)
{
	/* the software page-fault event reports the faulting address */
	return record_sample(ctx, EVENT_KIND_PAGE_FAULT, ctx->sample_period, ctx->addr);
}

SEC("perf_event")
int sample_cache_miss(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_CACHE_MISS, ctx->sample_period, ctx->addr);
}

SEC("perf_event")
int sample_remote_access(struct bpf_perf_event_data *ctx)
{
	return record_sample(ctx, EVENT_KIND_REMOTE_ACCESS, ctx->sample_period, ctx->addr);
}

/*
 * NUMA-balancing hinting faults: task_numa_fault(last_cpupid, mem_node, pages, flags) runs in
 * the faulting task after the fault was handled; mem_node is where the page is now, so a fault
 * was remote when the kernel did not flag it local.
 */
static __always_inline int numa_fault(void *ctx, int pages, int flags)
{
	if (pages <= 0)
		return 0;
	record_sample(ctx, EVENT_KIND_NUMA_HINT_FAULT, pages, 0);
	if (!(flags & TNF_FAULT_LOCAL))
		record_sample(ctx, EVENT_KIND_REMOTE_ACCESS, pages, 0);
	return 0;
}

SEC("fentry/task_numa_fault")
int BPF_PROG(numa_fault_fentry, int last_cpupid, int mem_node, int pages, int flags)
{
	return numa_fault(ctx, pages, flags);
}

SEC("kprobe/task_numa_fault")
int BPF_KPROBE(numa_fault_kprobe, int last_cpupid, int mem_node, int pages, int flags)
{
	return numa_fault(ctx, pages, flags);
}

/* mm_migrate_pages(succeeded, failed, ...): the first argument is stable across kernels */
SEC("raw_tp/mm_migrate_pages")
int BPF_PROG(page_migration, unsigned long succeeded)
{
	if (succeeded)
		record_sample(ctx, EVENT_KIND_PAGE_MIGRATION, succeeded, 0);
	return 0;
}

/* a process that calls exec maps other files: its next sample is a first one again */
SEC("raw_tp/sched_process_exec")
int process_exec(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&sampled_processes, &tgid);
	return 0;
}

/* a process whose main thread exits is forgotten, so a later process reusing its pid is noticed */
SEC("raw_tp/sched_process_exit")
int process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if (tgid == (__u32)id)
		bpf_map_delete_elem(&sampled_processes, &tgid);
	return 0;
}

/*
 * Units of work (`--work-uprobe BINARY:SYMBOL`): calls of one function, e.g. a request handler,
 * counted per CPU. The agent attaches the uprobe to the sampled process only when it has one,
 * and reads the sum every drain: work per CPU-second is what tells slow nodes from busy ones.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} work_calls SEC(".maps");

SEC("uprobe")
int count_work(void *ctx)
{
	u32 zero = 0;
	u64 *calls = bpf_map_lookup_elem(&work_calls, &zero);

	if (calls)
		*calls += 1;
	return 0;
}
