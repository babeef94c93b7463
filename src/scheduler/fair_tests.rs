//! The scheduling rules alone, on a simulated engine: a step runs what `pick` chose, a
//! prompt is computed in one step, then every step commits one token.

use super::fair::{Candidate, FairShare, Room};
use super::share::{Priority, Share};

struct Req {
    share: Share,
    arrival: u64,
    prompt: usize,
    left: usize,
    started: bool,
    served: usize,
    first_step: Option<u64>,
    reserve: usize,
}

#[derive(Default)]
struct Sim {
    fair: FairShare,
    reqs: Vec<Req>,
    arrivals: u64,
    step: u64,
    kv_budget: usize,
    slots: usize,
    newcomers_alone: bool,
    newcomer_steps: u64,
    lower_rows: Option<usize>,
}

impl Sim {
    fn new(slots: usize) -> Sim {
        Sim {
            slots,
            kv_budget: usize::MAX,
            ..Sim::default()
        }
    }

    fn submit(&mut self, share: &Share, prompt: usize, output: usize) -> usize {
        self.fair.arrive(share);
        self.arrivals += 1;
        self.reqs.push(Req {
            share: share.clone(),
            arrival: self.arrivals,
            prompt,
            left: output,
            started: false,
            served: 0,
            first_step: None,
            reserve: 1,
        });
        self.reqs.len() - 1
    }

    fn kv_used(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.started && r.left > 0)
            .map(|r| r.reserve)
            .sum()
    }

    /// One step; returns the indices that ran.
    fn step(&mut self) -> Vec<usize> {
        self.step += 1;
        let open: Vec<usize> = (0..self.reqs.len())
            .filter(|&i| self.reqs[i].left > 0)
            .collect();
        let cands: Vec<Candidate<'_>> = open
            .iter()
            .map(|&i| {
                let r = &self.reqs[i];
                Candidate {
                    tenant: &r.share.tenant,
                    priority: r.share.priority,
                    arrival: r.arrival,
                    started: r.started,
                    urgent: r.first_step.is_none(),
                    cost: if r.started {
                        FairShare::cost(0, 1)
                    } else {
                        FairShare::cost(r.prompt, 0)
                    },
                    reserve: r.reserve,
                    rows: if r.started { 1 } else { r.prompt },
                }
            })
            .collect();
        let free = self.kv_budget.saturating_sub(self.kv_used());
        let room = Room {
            slots: self.slots,
            kv_free: free,
            newcomers_alone: self.newcomers_alone,
            lower_rows: self.lower_rows,
        };
        let picks = self.fair.pick(&cands, room);
        self.newcomer_steps += u64::from(picks.newcomers_only);
        let picked: Vec<usize> = picks.run.into_iter().map(|c| open[c]).collect();
        for &i in &picked {
            let step = self.step;
            let r = &mut self.reqs[i];
            let cost = if r.started {
                r.left -= 1;
                r.served += 1;
                FairShare::cost(0, 1)
            } else {
                r.started = true;
                r.first_step = Some(step);
                FairShare::cost(r.prompt, 0)
            };
            let tenant = r.share.tenant.clone();
            let done = r.left == 0;
            self.fair.charge(&tenant, cost);
            if done {
                self.fair.leave(&tenant);
            }
        }
        picked
    }

    fn served_by(&self, tenant: &str) -> usize {
        self.reqs
            .iter()
            .filter(|r| r.share.tenant == tenant)
            .map(|r| r.served)
            .sum()
    }
}

fn share(tenant: &str, weight: u32, priority: Priority) -> Share {
    Share {
        tenant: tenant.into(),
        weight,
        priority,
    }
}

#[test]
fn a_tenant_alone_gets_every_slot() {
    let mut sim = Sim::new(4);
    let a = share("a", 1, Priority::Batch);
    for _ in 0..6 {
        sim.submit(&a, 10, 50);
    }
    sim.step();
    assert_eq!(sim.step().len(), 4);
    assert_eq!(
        sim.reqs.iter().filter(|r| r.started).count(),
        4,
        "oldest four first"
    );
    assert!(sim.reqs[..4].iter().all(|r| r.started));
}

#[test]
fn a_newcomer_runs_at_the_next_step_beside_a_flood() {
    let mut sim = Sim::new(4);
    let a = share("a", 1, Priority::Standard);
    for _ in 0..32 {
        sim.submit(&a, 100, 200);
    }
    for _ in 0..20 {
        sim.step();
    }
    let b = sim.submit(&Share::standard("b"), 24, 24);
    let ran = sim.step();
    assert!(ran.contains(&b), "b waits behind nobody: {ran:?}");
    // One of a's running sequences paused for it; a's queued ones did not start.
    assert_eq!(ran.len(), 4);
    assert_eq!(sim.reqs.iter().filter(|r| r.started).count(), 5);
    // Its prompt is billed (24 units against a's 8 a step), then its counter stays below
    // a's: b decodes in nearly every step.
    let mut steps = 0;
    while sim.reqs[b].left > 0 {
        sim.step();
        steps += 1;
    }
    assert!(steps <= 24 + 3, "b took {steps} steps for 24 tokens");
}

#[test]
fn backlogged_tenants_are_served_in_proportion_to_their_weights() {
    for (wa, wc) in [(1, 1), (3, 1), (5, 2)] {
        let mut sim = Sim::new(8);
        for _ in 0..40 {
            sim.submit(&share("a", wa, Priority::Standard), 20, 100);
            sim.submit(&share("c", wc, Priority::Standard), 20, 100);
        }
        for _ in 0..300 {
            sim.step();
        }
        let (a, c) = (sim.served_by("a") as f64, sim.served_by("c") as f64);
        let want = f64::from(wa) / f64::from(wc);
        assert!(
            ((a / c) / want - 1.0).abs() < 0.05,
            "{wa}:{wc} served {a}:{c}"
        );
    }
}

#[test]
fn an_idle_tenant_banks_no_credit() {
    let mut fair = FairShare::default();
    let (a, b) = (Share::standard("a"), Share::standard("b"));
    fair.arrive(&a);
    fair.charge("a", 1000.0);
    fair.arrive(&b);
    // b arrived while a was active: lifted to a's counter, not left at zero.
    assert_eq!(fair.counter("b"), Some(1000.0));
    fair.charge("b", 10.0);
    fair.leave("b");
    fair.charge("a", 500.0);
    fair.arrive(&b);
    assert_eq!(
        fair.counter("b"),
        Some(1500.0),
        "lifted again on its return"
    );
    // A tenant active in another tier does not lift it.
    let c = share("c", 1, Priority::Batch);
    fair.arrive(&c);
    assert_eq!(fair.counter("c"), Some(0.0));
    // Everyone gone: the books start over.
    for t in ["a", "b", "c"] {
        fair.leave(t);
    }
    assert_eq!(fair.active_tenants(), 0);
    assert_eq!(fair.counter("a"), None);
}

#[test]
fn a_higher_tier_runs_first_and_its_prompt_pauses_lower_tiers() {
    let mut sim = Sim::new(4);
    let batch = share("bulk", 10, Priority::Batch);
    for _ in 0..8 {
        sim.submit(&batch, 50, 100);
    }
    for _ in 0..5 {
        sim.step();
    }
    let i = sim.submit(&share("chat", 1, Priority::Interactive), 20, 3);
    let ran = sim.step();
    assert_eq!(ran, vec![i], "the interactive prompt runs alone");
    // Decoding, it shares the step with the batch tier (interactive first).
    let ran = sim.step();
    assert_eq!(ran[0], i);
    assert_eq!(ran.len(), 4);
    // A standard tenant goes before batch, weight or not.
    let s = sim.submit(&Share::standard("std"), 20, 50);
    let ran = sim.step();
    assert_eq!(&ran[..2], &[i, s]);
}

#[test]
fn a_waiting_request_that_does_not_fit_is_not_overtaken() {
    let mut sim = Sim::new(8);
    sim.kv_budget = 10;
    let a = Share::standard("a");
    let first = sim.submit(&a, 10, 5);
    sim.reqs[first].reserve = 6;
    sim.step();
    let big = sim.submit(&Share::standard("b"), 10, 5);
    sim.reqs[big].reserve = 8;
    let small = sim.submit(&Share::standard("c"), 10, 5);
    sim.reqs[small].reserve = 1;
    // b is the fairer waiting request and does not fit: c (which would) waits too.
    let ran = sim.step();
    assert_eq!(ran, vec![first]);
    while sim.reqs[first].left > 0 {
        sim.step();
    }
    let ran = sim.step();
    assert!(ran.contains(&big) && ran.contains(&small), "{ran:?}");
}

#[test]
fn the_gap_between_two_backlogged_tenants_stays_bounded() {
    // VTC's bound: about twice the largest request's cost. Requests here cost at most
    // 100 prompt + 2 × 60 output = 220.
    let mut sim = Sim::new(6);
    let (a, b) = (Share::standard("a"), Share::standard("b"));
    for n in 0..30 {
        sim.submit(&a, 100, 20 + n);
        sim.submit(&b, 10, 60);
    }
    let mut worst: f64 = 0.0;
    for _ in 0..400 {
        sim.step();
        if let (Some(x), Some(y)) = (sim.fair.counter("a"), sim.fair.counter("b")) {
            if sim.reqs.iter().any(|r| r.share.tenant == "a" && r.left > 0)
                && sim.reqs.iter().any(|r| r.share.tenant == "b" && r.left > 0)
            {
                worst = worst.max((x - y).abs());
            }
        }
    }
    assert!(worst <= 2.0 * 220.0, "counters drifted {worst} apart");
}

#[test]
fn a_newcomer_may_have_a_step_of_its_own_and_a_flood_never_does() {
    let mut sim = Sim::new(4);
    sim.newcomers_alone = true;
    let a = Share::standard("a");
    for _ in 0..8 {
        sim.submit(&a, 30, 100);
    }
    // A's first prompts: nothing of a's decodes yet, so they are newcomers (alone anyway).
    sim.step();
    let steps_before = sim.newcomer_steps;
    for _ in 0..10 {
        sim.step();
    }
    assert_eq!(
        sim.newcomer_steps, steps_before,
        "a's later requests are not newcomers"
    );
    let b = sim.submit(&Share::standard("b"), 24, 5);
    assert_eq!(sim.step(), vec![b], "b's prompt runs alone");
    assert_eq!(sim.step().len(), 4, "then b decodes beside a");
    // A newcomer of a lower tier than a running tenant is not alone.
    let c = sim.submit(&share("c", 1, Priority::Batch), 24, 5);
    let ran = sim.step();
    assert!(!ran.contains(&c) && ran.len() == 4, "{ran:?}");
}

#[test]
fn an_interactive_tenants_steps_carry_few_lower_tier_rows() {
    let mut sim = Sim::new(8);
    let bulk = share("bulk", 1, Priority::Batch);
    for _ in 0..8 {
        sim.submit(&bulk, 4, 100);
    }
    sim.step();
    assert_eq!(sim.step().len(), 8);
    sim.lower_rows = Some(3);
    let chat = sim.submit(&share("chat", 1, Priority::Interactive), 20, 10);
    // Its prompt pauses the batch tier; then it decodes with at most 3 batch rows.
    assert_eq!(sim.step(), vec![chat]);
    let ran = sim.step();
    assert_eq!((ran[0], ran.len()), (chat, 4));
    // A batch prompt still starts, in chunks of the rows left.
    let open: Vec<Candidate<'_>> = [(0, true, 1), (1, false, 64)]
        .iter()
        .map(|&(arrival, started, rows)| Candidate {
            tenant: "bulk",
            priority: Priority::Batch,
            arrival,
            started,
            urgent: !started,
            cost: 1.0,
            reserve: 0,
            rows,
        })
        .collect();
    let room = Room {
        slots: 8,
        kv_free: usize::MAX,
        newcomers_alone: false,
        lower_rows: Some(3),
    };
    let picks = sim.fair.pick(&open, room);
    assert_eq!((picks.run, picks.rows), (vec![0, 1], vec![1, 2]));
}
