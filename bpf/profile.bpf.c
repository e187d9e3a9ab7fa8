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
 * Beside them, exec and exit of processes keep `sampled_processes` and `unwind_processes` true
 * (which processes the agent has been told of, and their unwind tables).
 *
 * User stacks are unwound in the kernel from tables the agent compiles from .eh_frame
 * (docs/design/014) by programs of their own, one per program type, reached by tail calls
 * (docs/design/030): each steps a few frames and hands the walk to the next, so the verifier
 * checks the work of a few frames per program whatever the depth, and a kernel that refuses the
 * unwinder keeps every source sampling, with stack copies or frame pointers.
 *
 * Everything here loads on Linux 5.10 and later: helpers of later kernels are called only
 * where the kernel's BTF says it has them (CO-RE), and no callback (bpf_loop, 5.17) is used.
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
#define ENODATA 61

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

/*
 * Processes (struct new_process) sampled for the first time, or whose chains met code outside
 * their mappings with tables or whose entry is for another address space (`report_miss`), read
 * continuously by the agent
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} new_processes SEC(".maps");

/*
 * Unwind tables (docs/design/014): the rows of every image's table, one after the other; an
 * image's rows are found through the mappings of each process in `unwind_processes`. Both are
 * written by the agent; entries are sized by it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rows SEC(".maps");

/* by tgid: the process's executable mappings and where their images' rows are */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct unwind_process);
} unwind_processes SEC(".maps");

/*
 * User chains unwound in the kernel, by a hash of their addresses; samples carry the hash. LRU:
 * the chains of the samples not drained yet are the ones in use.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct user_chain);
} user_chains SEC(".maps");

/*
 * When each process with tables last had an address outside all its mappings (ns), so that it is
 * told to the agent again (a library loaded late) at most every UNWIND_MISS_INTERVAL_NS.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} unwind_misses SEC(".maps");

#define UNWIND_MISS_INTERVAL_NS (2ULL * 1000 * 1000 * 1000)

/*
 * A sample whose user stack is being unwound from tables, and the walk so far: written by the
 * program that took the sample, then carried from one unwinder program to the next.
 */
struct unwind_walk {
	struct sample_key key;
	/* events the sample stands for, and its data address (0: none) */
	__u64 weight;
	__u64 address;
	/* the address space the sample was taken in (see `struct new_process`) */
	__u64 mm;
	struct user_chain chain;
	/* registers of the frame being stepped */
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u64 hash;
	/*
	 * the bounds of a binary search, kept in map memory: the verifier then knows nothing of
	 * their values and sees every round of a search alike, instead of 2^rounds paths
	 */
	__u32 lo;
	__u32 hi;
	/* an address of the chain lay in no mapping the process's entry has */
	__u32 missed;
	/* the walk is over: the chain is as long as it can be */
	__u32 done;
	/* a second event kind the same sample is counted as (enum event_kind; 0: none) */
	__u32 also;
};

/*
 * One state per CPU for perf-event programs and one for tracing programs: a perf event's
 * program (a timer interrupt, or an NMI) may interrupt a tracing program's walk on the same CPU,
 * while perf-event programs never nest in each other (the kernel skips one that would) and the
 * tracing programs here do not nest in each other either (each is skipped while it runs on a
 * CPU, and kprobes while any tracing program runs there).
 */
enum unwind_slot {
	UNWIND_SLOT_PERF_EVENT = 0,
	UNWIND_SLOT_TRACING = 1,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct unwind_walk);
} unwind_walks SEC(".maps");

/*
 * The unwinder program of each program type, at index 0, put there by user space once it loaded
 * (a tail call only reaches a program of the caller's type; fentry ones also of its target). An
 * empty array is an unwinder this kernel refused or that was not asked for: samples then go as
 * stack copies or with frame-pointer stacks.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwinder_perf_event SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwinder_fentry SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwinder_kprobe SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} unwinder_raw_tp SEC(".maps");

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
 * `auto` unwinding: processes whose tables the agent wrote are unwound in the kernel; until then
 * (the first milliseconds of a process), or when no unwinder program loaded, a stack snapshot is
 * sent for the agent to unwind
 */
const volatile bool unwind_auto = false;

/*
 * Tests only (`--test-refuse`): programs that make the verifier refuse them, one bit per enum
 * event_kind for the program sampling it, and TEST_REFUSE_UNWINDER for the unwinders. The
 * refusal is the kernel's own, so what the agent does about it is tested as it happens.
 */
const volatile __u32 refuse_for_test = 0;

#define TEST_REFUSE_UNWINDER (1u << 31)

/* which sample map programs count into; flipped by user space before each drain */
__u32 active_buffer = 0;

/* emit the shared types into BTF so the skeleton carries them to Rust */
enum process_state _process_state = 0;
struct sample_key _sample_key = {};
struct sample_value _sample_value = {};
struct data_sample _data_sample = {};
struct stack_snapshot _stack_snapshot = {};
struct new_process _new_process = {};
struct unwind_row _unwind_row = {};
struct unwind_process _unwind_process = {};
struct user_chain _user_chain = {};
enum unwind_rule _unwind_rule = 0;
enum event_kind _event_kind = 0;
enum drop_reason _drop_reason = 0;

/* x86-64's user code segment selector (__USER_CS): saved registers of a 64-bit task in user mode */
#define USER_CS 0x33

/*
 * A program the verifier must refuse (see `refuse_for_test`): it reads memory at an address
 * that is only a number.
 */
static __always_inline int refused_for_test(void)
{
	return *(volatile int *)(long)bpf_get_prandom_u32();
}

static __always_inline void count_drop(enum event_kind event, enum drop_reason reason)
{
	__u32 index = event * DROP_REASON_COUNT + reason;
	__u64 *n = bpf_map_lookup_elem(&drops, &index);

	if (n)
		*n += 1;
}

/*
 * Where the current task's user registers were saved when it last entered the kernel: the
 * sample's own registers when it was taken in user mode. NULL when they cannot be found.
 */
static __always_inline struct pt_regs *user_regs(void)
{
	struct task_struct *task;
	struct pt_regs *regs;
	__u64 cs = 0;
	void *stack;

	/* 5.15 and later say it themselves */
	if (bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs))
		return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	/*
	 * Before: on x86-64 they sit at the top of the task's kernel stack (task_pt_regs()), which
	 * is 16 KiB, or 32 KiB in kernels built with KASAN. A candidate is taken only when the code
	 * segment saved there is the user one.
	 */
	task = (struct task_struct *)bpf_get_current_task();
	stack = BPF_CORE_READ(task, stack);
	if (!stack)
		return NULL;
	regs = (struct pt_regs *)(stack + 16384 - bpf_core_type_size(struct pt_regs));
	if (!bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs) && cs == USER_CS)
		return regs;
	regs = (struct pt_regs *)(stack + 32768 - bpf_core_type_size(struct pt_regs));
	if (!bpf_probe_read_kernel(&cs, sizeof(cs), &regs->cs) && cs == USER_CS)
		return regs;
	return NULL;
}

/* the current task's address space (its mm_struct's address, a cookie); 0 for kernel threads */
static __always_inline __u64 current_mm(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();

	return (__u64)BPF_CORE_READ(task, mm);
}

/*
 * What the agent knows of process `tgid` (enum process_state); at its first sample, tells the
 * agent about it (see `sampled_processes`).
 */
static __always_inline __u8 process_state(__u32 tgid, __u64 mm)
{
	__u8 noticed = PROCESS_NOTICED, *state;
	struct new_process *out;

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
	out->tgid = tgid;
	out->_pad = 0;
	out->mm = mm;
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
	struct stack_snapshot *snap;
	struct pt_regs *regs;
	__u64 sp, len, chunk;
	int i;

	regs = user_regs();
	if (!regs)
		return false;
	snap = bpf_ringbuf_reserve(&stack_snapshots, sizeof(*snap), 0);
	if (!snap) {
		count_drop(key->event, DROP_SNAPSHOT_RING_FULL);
		return false;
	}
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

/*
 * Counts one sample of `key` standing for `weight` events into the active sample map, and sends
 * its data address when it has one and they are wanted.
 */
static __always_inline void count_sample(struct sample_key *key, __u64 weight, __u64 address)
{
	struct sample_value first = {.count = 1, .value = weight}, *value;
	struct data_sample *data;
	void *samples;

	samples = active_buffer ? (void *)&samples_1 : (void *)&samples_0;
	value = bpf_map_lookup_elem(samples, key);
	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		__sync_fetch_and_add(&value->value, weight);
	} else if (bpf_map_update_elem(samples, key, &first, BPF_NOEXIST)) {
		/* another CPU may have inserted the key meanwhile */
		value = bpf_map_lookup_elem(samples, key);
		if (value) {
			__sync_fetch_and_add(&value->count, 1);
			__sync_fetch_and_add(&value->value, weight);
		} else {
			count_drop(key->event, DROP_SAMPLE_MAP_FULL);
			return;
		}
	}

	if (!address || !send_data_addresses)
		return;
	data = bpf_ringbuf_reserve(&data_samples, sizeof(*data), 0);
	if (!data) {
		count_drop(key->event, DROP_DATA_RING_FULL);
		return;
	}
	data->tgid = key->tgid;
	data->pid = key->pid;
	data->event = key->event;
	data->user_stack_id = key->user_stack_id;
	data->user_chain = key->user_chain;
	data->address = address;
	data->weight = weight;
	bpf_ringbuf_submit(data, 0);
}

/* binary search steps over a process's mappings (UNWIND_MAX_MAPPINGS + 1 outcomes) */
#define MAPPING_SEARCH_STEPS 8
/* binary search steps over an image's rows: tables of up to 2^24 rows */
#define ROW_SEARCH_STEPS 25
#define UNWIND_MAX_ROWS (1 << 24)

/*
 * Frames one unwinder program steps before it hands the walk to the next by a tail call: the
 * verifier checks each program alone, so its work is that of this many frames whatever the
 * depth. MAX_STACK_DEPTH frames take 16 programs; a chain of tail calls may have 32 (33 since
 * Linux 5.17), the first being the sampling program's.
 */
#define UNWIND_FRAMES_PER_PROGRAM 8

/* the mapping of `process` that holds `ip`, or NULL */
static __always_inline struct unwind_mapping *find_mapping(struct unwind_walk *s,
							   struct unwind_process *process, __u64 ip)
{
	struct unwind_mapping *m;
	__u32 lo, hi, mid;
	int i;

	s->lo = 0;
	s->hi = process->len;
	/* the first mapping that starts above ip: the one before it may hold ip */
	for (i = 0; i < MAPPING_SEARCH_STEPS; i++) {
		lo = s->lo;
		hi = s->hi;
		if (lo >= hi || hi > UNWIND_MAX_MAPPINGS)
			break;
		mid = (lo + hi) / 2;
		/* the compiler knows mid < hi <= UNWIND_MAX_MAPPINGS, the verifier is shown */
		barrier_var(mid);
		mid &= UNWIND_MAX_MAPPINGS - 1;
		if (process->mappings[mid].start <= ip)
			s->lo = mid + 1;
		else
			s->hi = mid;
	}
	lo = s->lo;
	if (lo == 0 || lo > UNWIND_MAX_MAPPINGS)
		return NULL;
	lo -= 1;
	barrier_var(lo);
	lo &= UNWIND_MAX_MAPPINGS - 1;
	m = &process->mappings[lo];
	return ip < m->end ? m : NULL;
}

/* the row of `m`'s image that holds image address `pc`, or NULL */
static __always_inline struct unwind_row *find_row(struct unwind_walk *s, struct unwind_mapping *m,
						   __u32 pc)
{
	struct unwind_row *row;
	__u32 lo, hi, mid, index;
	int i;

	s->lo = 0;
	s->hi = m->rows_len;
	/* the first row that starts above pc: the one before it holds pc */
	for (i = 0; i < ROW_SEARCH_STEPS; i++) {
		lo = s->lo;
		hi = s->hi;
		if (lo >= hi || hi > UNWIND_MAX_ROWS)
			break;
		mid = lo + (hi - lo) / 2;
		index = m->rows_start + mid;
		row = bpf_map_lookup_elem(&unwind_rows, &index);
		if (!row)
			return NULL;
		if (row->pc <= pc)
			s->lo = mid + 1;
		else
			s->hi = mid;
	}
	lo = s->lo;
	if (lo == 0)
		return NULL;
	index = m->rows_start + lo - 1;
	return bpf_map_lookup_elem(&unwind_rows, &index);
}

/*
 * One frame: records the frame's address, finds the rule for it and steps to its caller.
 * Returns 1 to end the walk (the chain is complete, or cannot go on), 0 to go on.
 */
static __always_inline int unwind_step(struct unwind_walk *s, struct unwind_process *process)
{
	__u64 ip = s->ip, lookup, cfa, ra = 0, bp = 0;
	__u8 rule = UNWIND_RULE_FRAME_POINTER;
	__s16 cfa_offset = 0, rbp_offset = 0;
	struct unwind_mapping *m;
	struct unwind_row *row;
	__u32 len = s->chain.len;

	if (len >= MAX_STACK_DEPTH)
		return 1;
	s->chain.pcs[len] = ip;
	s->chain.len = len + 1;
	s->hash = (s->hash ^ ip) * 0x100000001b3ULL;

	/* a caller's address is where its call returns to: the call itself is the byte before */
	lookup = len ? ip - 1 : ip;
	m = find_mapping(s, process, lookup);
	if (!m)
		s->missed = 1;
	if (m && m->rows_len && lookup - m->bias <= 0xffffffffULL) {
		row = find_row(s, m, lookup - m->bias);
		if (row) {
			rule = row->rule;
			cfa_offset = row->cfa_offset;
			rbp_offset = row->rbp_offset;
		}
	}
	switch (rule) {
	case UNWIND_RULE_END:
		s->chain.complete = 1;
		return 1;
	case UNWIND_RULE_CFA_RSP:
		cfa = s->sp + cfa_offset;
		break;
	case UNWIND_RULE_CFA_RBP:
		cfa = s->bp + cfa_offset;
		break;
	case UNWIND_RULE_PLT:
		cfa = s->sp + 8 + ((ip & 15) >= (__u64)cfa_offset ? 8 : 0);
		break;
	default:
		/* code no table covers walks frame pointers; a zero rbp ends such a chain */
		if (!s->bp) {
			s->chain.complete = 1;
			return 1;
		}
		cfa = s->bp + 16;
		rbp_offset = -16;
		break;
	}
	/* stacks grow down: a caller's frame is above its callee's */
	if (cfa <= s->sp && len)
		return 1;
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
		return 1;
	if (!ra) {
		s->chain.complete = 1;
		return 1;
	}
	if (rbp_offset) {
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + rbp_offset)))
			return 1;
		s->bp = bp;
	}
	s->sp = cfa;
	s->ip = ra;
	return 0;
}

/*
 * Tells the agent again of process `tgid`, whose chain met code outside every mapping its entry
 * has (a library loaded after its mappings were read): it reads them again and writes the new
 * tables. At most every UNWIND_MISS_INTERVAL_NS per process.
 */
static __always_inline void report_miss(__u32 tgid, __u64 mm)
{
	__u64 now = bpf_ktime_get_ns(), *last;
	struct new_process *out;

	last = bpf_map_lookup_elem(&unwind_misses, &tgid);
	if (last && now - *last < UNWIND_MISS_INTERVAL_NS)
		return;
	bpf_map_update_elem(&unwind_misses, &tgid, &now, BPF_ANY);
	out = bpf_ringbuf_reserve(&new_processes, sizeof(*out), 0);
	if (!out)
		return;
	out->tgid = tgid;
	out->_pad = 0;
	out->mm = mm;
	bpf_ringbuf_submit(out, 0);
}

/* counts a sample as `key`'s event kind and, when `also` is one, as that kind too */
static __always_inline void count_samples(struct sample_key *key, __u32 also, __u64 weight,
					  __u64 address)
{
	count_sample(key, weight, address);
	if (also) {
		key->event = also;
		count_sample(key, weight, address);
	}
}

/*
 * Starts unwinding the current task's user stack from its process's tables: writes the sample
 * and the first frame's registers into the CPU's state for the unwinder programs. False when
 * the process's entry is missing or for another address space (it is reported to be read again)
 * or its registers cannot be found: the sample then goes another way.
 */
static __always_inline bool begin_unwind(struct sample_key *key, __u32 also, __u64 weight,
					 __u64 address, __u64 mm, enum unwind_slot slot)
{
	struct unwind_process *process;
	struct unwind_walk *s;
	struct pt_regs *regs;
	__u32 index = slot;

	process = bpf_map_lookup_elem(&unwind_processes, &key->tgid);
	/*
	 * Marked for tables but without an entry (an exec removed it between the agent's writes of
	 * the entry and of the mark), or an entry read for the address space before an exec: read
	 * the process again.
	 */
	if (!process || process->mm != mm) {
		report_miss(key->tgid, mm);
		return false;
	}
	s = bpf_map_lookup_elem(&unwind_walks, &index);
	regs = user_regs();
	if (!s || !regs)
		return false;
	__builtin_memcpy(&s->key, key, sizeof(s->key));
	s->weight = weight;
	s->address = address;
	s->mm = mm;
	s->ip = BPF_CORE_READ(regs, ip);
	s->sp = BPF_CORE_READ(regs, sp);
	s->bp = BPF_CORE_READ(regs, bp);
	s->chain.len = 0;
	s->chain.complete = 0;
	s->hash = 0xcbf29ce484222325ULL;
	s->missed = 0;
	s->done = 0;
	s->also = also;
	return true;
}

/*
 * The body of every unwinder program: steps up to UNWIND_FRAMES_PER_PROGRAM frames of the walk
 * the CPU's state holds, then hands it to the next unwinder program (itself, through
 * `unwinders`), or, once the chain is over, stores it in `user_chains` and counts the sample
 * under its key.
 */
static __always_inline int unwind_frames(void *ctx, enum unwind_slot slot, void *unwinders)
{
	struct unwind_process *process;
	struct unwind_walk *s;
	__u32 index = slot;
	__u64 hash;
	int i;

	if (refuse_for_test & TEST_REFUSE_UNWINDER)
		return refused_for_test();
	s = bpf_map_lookup_elem(&unwind_walks, &index);
	if (!s)
		return 0;
	/* an exec or exit between two programs of the walk removes the entry: the chain ends */
	process = bpf_map_lookup_elem(&unwind_processes, &s->key.tgid);
	if (process && process->mm == s->mm) {
		for (i = 0; i < UNWIND_FRAMES_PER_PROGRAM; i++) {
			if (unwind_step(s, process)) {
				s->done = 1;
				break;
			}
		}
		if (!s->done) {
			bpf_tail_call(ctx, unwinders, 0);
			/* the kernel allows no more tail calls: what was walked is kept, incomplete
			 */
		}
	}

	if (s->missed)
		report_miss(s->key.tgid, s->mm);
	if (!s->chain.len) {
		count_drop(s->key.event, DROP_USER_STACK);
		return 0;
	}
	/* the complete flag tells two chains of the same addresses apart */
	hash = (s->hash ^ s->chain.complete) * 0x100000001b3ULL;
	hash ^= hash >> 29;
	if (!hash)
		hash = 1;
	if (!bpf_map_lookup_elem(&user_chains, &hash))
		bpf_map_update_elem(&user_chains, &hash, &s->chain, BPF_NOEXIST);
	s->key.user_chain = hash;
	s->key.user_stack_id = -ENODATA;
	count_samples(&s->key, s->also, s->weight, s->address);
	return 0;
}

/*
 * Counts one sample of `event` (and of `also` when it is an event kind: one sample counted as
 * two kinds) standing for `weight` events, with the current stacks; a process with tables is
 * handed to the unwinder program in `unwinders` (the caller's type), which counts the sample
 * once its chain is walked.
 */
static __always_inline int record_sample(void *ctx, enum event_kind event, __u32 also, __u64 weight,
					 __u64 address, enum unwind_slot slot, void *unwinders)
{
	struct sample_key key = {};
	__u64 id = bpf_get_current_pid_tgid();
	__u8 state = PROCESS_NOTICED;
	__u64 mm;
	bool user;

	key.tgid = id >> 32;
	key.pid = (__u32)id;
	/* the idle task is not work anybody can optimize */
	if (key.pid == 0)
		return 0;
	if (filter_tgid && key.tgid != filter_tgid)
		return 0;
	if (key.tgid == skip_tgid)
		return 0;

	if (also && !(enabled_events & (1u << also)))
		also = 0;
	if (!(enabled_events & (1u << event))) {
		if (!also)
			return 0;
		event = also;
		also = 0;
	}
	key.event = event;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	/* kernel threads map no files and have no user stack: nothing to tell or unwind */
	mm = current_mm();
	user = mm != 0;
	if (user)
		state = process_state(key.tgid, mm);

	/* a sample taken in user mode has no kernel stack: -EFAULT is expected there, not a loss */
	key.kernel_stack_id = bpf_get_stackid(ctx, &stacks, 0);
	if (key.kernel_stack_id < 0 && key.kernel_stack_id != -EFAULT)
		count_drop(event, DROP_KERNEL_STACK);

	if (user && !unwind_all && state == PROCESS_TABLES &&
	    begin_unwind(&key, also, weight, address, mm, slot)) {
		bpf_tail_call(ctx, unwinders, 0);
		/* no unwinder program loaded for this type: the sample goes another way */
	}
	/*
	 * No chain from tables (not read yet, or the entry is missing or for the address space
	 * before an exec until the agent reads the process again): a stack copy for the agent to
	 * unwind, not frame pointers that FP-less code would cut short. Processes the agent marked
	 * for frame pointers (no unwinder loaded) walk them.
	 */
	if (user && (unwind_all || (unwind_auto && state != PROCESS_FRAME_POINTERS)) &&
	    send_snapshot(&key, weight, address)) {
		if (!also)
			return 0;
		key.event = also;
		also = 0;
		if (send_snapshot(&key, weight, address))
			return 0;
	}
	/* kernel threads have no user stack: -EFAULT again */
	key.user_stack_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	if (key.user_stack_id < 0 && key.user_stack_id != -EFAULT)
		count_drop(event, DROP_USER_STACK);
	count_samples(&key, also, weight, address);
	return 0;
}

/* perf events: the period comes with every sample, the data address where the event has one */

#define REFUSE_FOR_TEST(event)                                                                     \
	if (refuse_for_test & (1u << (event)))                                                     \
	return refused_for_test()

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	REFUSE_FOR_TEST(EVENT_KIND_CPU);
	return record_sample(ctx, EVENT_KIND_CPU, 0, ctx->sample_period, 0, UNWIND_SLOT_PERF_EVENT,
			     &unwinder_perf_event);
}

SEC("perf_event")
int sample_page_fault(struct bpf_perf_event_data *ctx)
{
	REFUSE_FOR_TEST(EVENT_KIND_PAGE_FAULT);
	/* the software page-fault event reports the faulting address */
	return record_sample(ctx, EVENT_KIND_PAGE_FAULT, 0, ctx->sample_period, ctx->addr,
			     UNWIND_SLOT_PERF_EVENT, &unwinder_perf_event);
}

SEC("perf_event")
int sample_cache_miss(struct bpf_perf_event_data *ctx)
{
	REFUSE_FOR_TEST(EVENT_KIND_CACHE_MISS);
	return record_sample(ctx, EVENT_KIND_CACHE_MISS, 0, ctx->sample_period, ctx->addr,
			     UNWIND_SLOT_PERF_EVENT, &unwinder_perf_event);
}

SEC("perf_event")
int sample_remote_access(struct bpf_perf_event_data *ctx)
{
	REFUSE_FOR_TEST(EVENT_KIND_REMOTE_ACCESS);
	return record_sample(ctx, EVENT_KIND_REMOTE_ACCESS, 0, ctx->sample_period, ctx->addr,
			     UNWIND_SLOT_PERF_EVENT, &unwinder_perf_event);
}

SEC("perf_event")
int unwind_perf_event(struct bpf_perf_event_data *ctx)
{
	return unwind_frames(ctx, UNWIND_SLOT_PERF_EVENT, &unwinder_perf_event);
}

/*
 * NUMA-balancing hinting faults: task_numa_fault(last_cpupid, mem_node, pages, flags) runs in
 * the faulting task after the fault was handled; mem_node is where the page is now, so a fault
 * was remote when the kernel did not flag it local: one sample then counts as a hinting fault
 * and as a remote_access.
 */
static __always_inline int numa_fault(void *ctx, int pages, int flags, void *unwinders)
{
	__u32 remote = flags & TNF_FAULT_LOCAL ? 0 : EVENT_KIND_REMOTE_ACCESS;

	if (refuse_for_test &
	    ((1u << EVENT_KIND_NUMA_HINT_FAULT) | (1u << EVENT_KIND_REMOTE_ACCESS)))
		return refused_for_test();
	if (pages <= 0)
		return 0;
	return record_sample(ctx, EVENT_KIND_NUMA_HINT_FAULT, remote, pages, 0, UNWIND_SLOT_TRACING,
			     unwinders);
}

SEC("fentry/task_numa_fault")
int BPF_PROG(numa_fault_fentry, int last_cpupid, int mem_node, int pages, int flags)
{
	return numa_fault(ctx, pages, flags, &unwinder_fentry);
}

/* the unwinder of fentry programs, loaded for the same function (a tail call needs it) */
SEC("fentry/task_numa_fault")
int BPF_PROG(unwind_fentry)
{
	return unwind_frames(ctx, UNWIND_SLOT_TRACING, &unwinder_fentry);
}

SEC("kprobe/task_numa_fault")
int BPF_KPROBE(numa_fault_kprobe, int last_cpupid, int mem_node, int pages, int flags)
{
	return numa_fault(ctx, pages, flags, &unwinder_kprobe);
}

SEC("kprobe")
int unwind_kprobe(struct pt_regs *ctx)
{
	return unwind_frames(ctx, UNWIND_SLOT_TRACING, &unwinder_kprobe);
}

/* mm_migrate_pages(succeeded, failed, ...): the first argument is stable across kernels */
SEC("raw_tp/mm_migrate_pages")
int BPF_PROG(page_migration, unsigned long succeeded)
{
	REFUSE_FOR_TEST(EVENT_KIND_PAGE_MIGRATION);
	if (succeeded)
		record_sample(ctx, EVENT_KIND_PAGE_MIGRATION, 0, succeeded, 0, UNWIND_SLOT_TRACING,
			      &unwinder_raw_tp);
	return 0;
}

SEC("raw_tp")
int unwind_raw_tp(void *ctx)
{
	return unwind_frames(ctx, UNWIND_SLOT_TRACING, &unwinder_raw_tp);
}

/* a process that calls exec maps other files: its next sample is a first one again */
SEC("raw_tp/sched_process_exec")
int process_exec(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&sampled_processes, &tgid);
	bpf_map_delete_elem(&unwind_processes, &tgid);
	return 0;
}

/* a process whose main thread exits is forgotten, so a later process reusing its pid is noticed */
SEC("raw_tp/sched_process_exit")
int process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;

	if (tgid == (__u32)id) {
		bpf_map_delete_elem(&sampled_processes, &tgid);
		bpf_map_delete_elem(&unwind_processes, &tgid);
	}
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
