//! Virtual-token-counter fairness (VTC, Sheng et al., OSDI 2024) over strict priority tiers.
//!
//! Every tenant has a counter of the work the engine did for it, divided by its weight. Each
//! step the engine lists what could run (sequences holding KV and requests still waiting) and
//! [`FairShare::pick`] fills the step's slots: highest tier first; within a tier, again and
//! again the tenant with the smallest counter (plus what this step's picks already add to it)
//! gets its oldest candidate. A tenant that was idle is lifted to the smallest counter of the
//! active tenants in its tier when it returns, so idleness banks no credit. Work is charged
//! after it is done: prompt tokens computed (a prefix-cache hit costs nothing) and tokens
//! committed, VTC's weights 1 and 2; drafted rows that were rejected are not billed.

use std::collections::{HashMap, VecDeque};

use super::share::{Priority, Share};

/// What one computed prompt token costs a tenant's counter (before its weight).
pub const PROMPT_TOKEN_CHARGE: f64 = 1.0;
/// What one committed output token costs (a decode row reads the whole cache: VTC's w_q).
pub const OUTPUT_TOKEN_CHARGE: f64 = 2.0;

/// One thing that could run in this step.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub tenant: &'a str,
    pub priority: Priority,
    /// Arrival order (smaller first): first come, first served within a tenant.
    pub arrival: u64,
    /// Holds KV already (admitted earlier): runs before its tenant's waiting requests.
    pub started: bool,
    /// Still waiting for its first token (queued or prefilling).
    pub urgent: bool,
    /// This step's work for it, in charge units (see [`FairShare::cost`]).
    pub cost: f64,
    /// KV bytes it must reserve to start (ignored once started).
    pub reserve: usize,
    /// Rows it puts in the step (a decode row, a prompt chunk).
    pub rows: usize,
}

/// What a step has room for.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    /// Most sequences in the step.
    pub slots: usize,
    /// KV bytes not yet reserved.
    pub kv_free: usize,
    /// The step may run newcomers alone (see [`FairShare::pick`]).
    pub newcomers_alone: bool,
    /// Most rows the tiers below `interactive` may put in the step (None: no limit): the
    /// engine keeps an interactive tenant's steps short while it is active.
    pub lower_rows: Option<usize>,
}

#[derive(Debug, Clone)]
struct Book {
    counter: f64,
    weight: f64,
    priority: Priority,
    /// Requests waiting or running.
    active: usize,
}

/// The tenants' counters.
#[derive(Debug, Default)]
pub struct FairShare {
    books: HashMap<String, Book>,
}

impl FairShare {
    /// Work in charge units: prompt tokens computed and output tokens committed.
    pub fn cost(prompt_tokens: usize, output_tokens: usize) -> f64 {
        prompt_tokens as f64 * PROMPT_TOKEN_CHARGE + output_tokens as f64 * OUTPUT_TOKEN_CHARGE
    }

    /// A request of `share`'s tenant entered the engine. A tenant that had nothing waiting or
    /// running is lifted to the smallest counter among its tier's active tenants.
    pub fn arrive(&mut self, share: &Share) {
        let floor = self
            .books
            .iter()
            .filter(|(t, b)| b.active > 0 && b.priority == share.priority && *t != &share.tenant)
            .map(|(_, b)| b.counter)
            .min_by(f64::total_cmp);
        let book = self.books.entry(share.tenant.clone()).or_insert(Book {
            counter: 0.0,
            weight: 1.0,
            priority: share.priority,
            active: 0,
        });
        if book.active == 0 {
            if let Some(floor) = floor {
                book.counter = book.counter.max(floor);
            }
        }
        book.weight = f64::from(share.weight.max(1));
        book.priority = share.priority;
        book.active += 1;
    }

    /// A request of `tenant` ended (finished, failed or cancelled). When no tenant is active
    /// the counters start again from zero.
    pub fn leave(&mut self, tenant: &str) {
        if let Some(book) = self.books.get_mut(tenant) {
            book.active = book.active.saturating_sub(1);
        }
        if self.books.values().all(|b| b.active == 0) {
            self.books.clear();
        }
    }

    /// Bill `tenant` for work done (charge units, see [`FairShare::cost`]).
    pub fn charge(&mut self, tenant: &str, cost: f64) {
        if let Some(book) = self.books.get_mut(tenant) {
            book.counter += cost / book.weight;
        }
    }

    /// A tenant's counter: its weighted service so far (tests and metrics).
    pub fn counter(&self, tenant: &str) -> Option<f64> {
        self.books.get(tenant).map(|b| b.counter)
    }

    /// Whether `tenant` has requests waiting or running.
    pub fn is_active(&self, tenant: &str) -> bool {
        self.books.get(tenant).is_some_and(|b| b.active > 0)
    }

    /// Tenants with requests waiting or running.
    pub fn active_tenants(&self) -> usize {
        self.books.values().filter(|b| b.active > 0).count()
    }

    /// Fill up to `slots` places from `candidates` (indices, in the order picked). A waiting
    /// request starts only while its reservation fits in `kv_free`; once the fairest waiting
    /// request does not fit, no later one starts this step, so a large request is never
    /// overtaken for ever. Once a request of some tier that still waits for its first token
    /// is picked, lower tiers sit this step out.
    ///
    /// With `newcomers_alone`, a step may run only *newcomers*: requests waiting for their
    /// first token whose tenant has nothing decoding (a tenant sending one request at a
    /// time), of the highest tier present. A prompt then costs its own pass, not a pass
    /// shared with every other tenant's decode rows (on the CPU 16 decode rows double a short
    /// prompt's step). The caller decides how often (it costs everyone else a step).
    pub fn pick(&self, candidates: &[Candidate<'_>], room: Room) -> Picks {
        if room.newcomers_alone {
            let newcomers = newcomers(candidates);
            if !newcomers.is_empty() {
                let only: Vec<Candidate<'_>> =
                    newcomers.iter().map(|&i| candidates[i].clone()).collect();
                let (run, rows) = self.fill(&only, room);
                if !run.is_empty() {
                    return Picks {
                        run: run.into_iter().map(|j| newcomers[j]).collect(),
                        rows,
                        newcomers_only: true,
                    };
                }
            }
        }
        let (run, rows) = self.fill(candidates, room);
        Picks {
            run,
            rows,
            newcomers_only: false,
        }
    }

    /// The picks and the rows each may put in the step (usize::MAX: no limit of the room's).
    fn fill(&self, candidates: &[Candidate<'_>], room: Room) -> (Vec<usize>, Vec<usize>) {
        let slots = room.slots;
        let mut chosen = Vec::with_capacity(slots.min(candidates.len()));
        let mut granted = Vec::with_capacity(slots.min(candidates.len()));
        let mut kv_left = room.kv_free;
        let mut lower_left = room.lower_rows.unwrap_or(usize::MAX);
        let mut starts_open = true;
        for tier in Priority::ALL {
            if chosen.len() >= slots {
                break;
            }
            let mut queues = self.queues(candidates, tier);
            let mut urgent = false;
            while chosen.len() < slots {
                let Some(q) = fairest(&queues, candidates) else {
                    break;
                };
                let queue = &mut queues[q];
                let Some(i) = queue.items.pop_front() else {
                    break;
                };
                let c = &candidates[i];
                // Under an interactive tenant's limit a prompt runs in smaller chunks.
                let lower = tier < Priority::Interactive && room.lower_rows.is_some();
                if lower && lower_left == 0 {
                    continue;
                }
                let rows = if lower {
                    c.rows.min(lower_left)
                } else {
                    usize::MAX
                };
                if !c.started {
                    if !starts_open || c.reserve > kv_left {
                        // The rest of this tenant's queue is waiting requests too.
                        starts_open = false;
                        queue.items.clear();
                        continue;
                    }
                    kv_left -= c.reserve;
                }
                queue.projected += c.cost / queue.weight;
                if lower {
                    lower_left -= rows;
                }
                urgent |= c.urgent;
                chosen.push(i);
                granted.push(rows);
            }
            if urgent {
                break;
            }
        }
        (chosen, granted)
    }

    /// The tier's candidates by tenant: sequences holding KV first, then by arrival.
    fn queues(&self, candidates: &[Candidate<'_>], tier: Priority) -> Vec<Queue> {
        let mut by_tenant: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            if c.priority == tier {
                by_tenant.entry(c.tenant).or_default().push(i);
            }
        }
        let mut queues: Vec<Queue> = by_tenant
            .into_iter()
            .map(|(tenant, mut items)| {
                items.sort_by_key(|&i| (!candidates[i].started, candidates[i].arrival));
                let book = self.books.get(tenant);
                Queue {
                    projected: book.map_or(0.0, |b| b.counter),
                    weight: book.map_or(1.0, |b| b.weight),
                    items: items.into(),
                }
            })
            .collect();
        // Deterministic order for equal counters: the oldest head first.
        queues.sort_by_key(|q| q.items.front().map(|&i| candidates[i].arrival));
        queues
    }
}

/// What a step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picks {
    /// Indices into the candidates, in the order picked.
    pub run: Vec<usize>,
    /// The most rows each may put in the step (usize::MAX: as many as the step's budget
    /// allows); a decode granted 1 row drafts nothing.
    pub rows: Vec<usize>,
    /// Only newcomers run (see [`FairShare::pick`]).
    pub newcomers_only: bool,
}

/// The newcomers of the highest tier present: requests waiting for their first token whose
/// tenant has nothing past its first token.
fn newcomers(candidates: &[Candidate<'_>]) -> Vec<usize> {
    let Some(top) = candidates.iter().map(|c| c.priority).max() else {
        return Vec::new();
    };
    let decoding: std::collections::HashSet<&str> = candidates
        .iter()
        .filter(|c| !c.urgent)
        .map(|c| c.tenant)
        .collect();
    (0..candidates.len())
        .filter(|&i| {
            let c = &candidates[i];
            c.urgent && c.priority == top && !decoding.contains(c.tenant)
        })
        .collect()
}

struct Queue {
    projected: f64,
    weight: f64,
    items: VecDeque<usize>,
}

/// The non-empty queue with the smallest projected counter (ties: the oldest head).
fn fairest(queues: &[Queue], candidates: &[Candidate<'_>]) -> Option<usize> {
    queues
        .iter()
        .enumerate()
        .filter_map(|(q, queue)| queue.items.front().map(|&i| (q, queue.projected, i)))
        .min_by(|a, b| {
            a.1.total_cmp(&b.1)
                .then(candidates[a.2].arrival.cmp(&candidates[b.2].arrival))
        })
        .map(|(q, _, _)| q)
}
