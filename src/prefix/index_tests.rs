use super::*;

const B: usize = 4;
const A: CacheScope = CacheScope(1);
const OTHER: CacheScope = CacheScope(2);

fn toks(range: std::ops::Range<u32>) -> Vec<TokenId> {
    range.collect()
}

#[test]
fn a_prompt_hits_the_full_blocks_it_shares_and_leaves_its_last_token() {
    let mut ix = PrefixIndex::new(B, 64, 1.0);
    let r = ix.register(A, &toks(0..10), None); // two full blocks; the last two tokens are left out
    assert_eq!(
        r.created.iter().map(|c| c.1).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert!(r.evicted.is_empty());
    // Shares 9 tokens: the first two blocks match.
    let mut p = toks(0..9);
    p.extend([99, 98]);
    assert_eq!(ix.lookup(A, &p).tokens, 8);
    // Exactly the cached 8 tokens: the last token is always computed, so one block hits.
    assert_eq!(ix.lookup(A, &toks(0..8)).tokens, 4);
    // Diverges inside the second block.
    assert_eq!(ix.lookup(A, &[0, 1, 2, 3, 4, 5, 0, 7, 8, 9]).tokens, 4);
    // Diverges in the first: nothing, even where a later block's tokens agree.
    assert_eq!(ix.lookup(A, &[9, 1, 2, 3, 4, 5, 6, 7, 8]).tokens, 0);
    assert_eq!(ix.stats().hit_tokens, 16);
    assert_eq!(ix.stats().queried_tokens, 11 + 8 + 10 + 9);
}

#[test]
fn another_scope_never_hits_the_same_tokens() {
    let mut ix = PrefixIndex::new(B, 64, 1.0);
    ix.register(A, &toks(0..12), None);
    assert_eq!(ix.lookup(OTHER, &toks(0..12)).tokens, 0);
    assert_eq!(ix.lookup(A, &toks(0..12)).tokens, 8);
    // The other scope's own copy is its own blocks.
    let r = ix.register(OTHER, &toks(0..12), None);
    assert_eq!(r.created.len(), 3);
    assert_eq!((ix.held_by(A), ix.held_by(OTHER)), (3, 3));
}

#[test]
fn registering_again_creates_nothing_and_extends_the_chain() {
    let mut ix = PrefixIndex::new(B, 64, 1.0);
    let first = ix.register(A, &toks(0..8), None);
    let again = ix.register(A, &toks(0..16), None);
    assert_eq!(
        again.created.iter().map(|c| c.1).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert_eq!(&again.chain[..2], &first.chain[..]);
    assert_eq!(ix.len(), 4);
}

#[test]
fn the_least_recently_used_leaf_leaves_first_and_chains_are_never_cut() {
    let mut ix = PrefixIndex::new(B, 4, 1.0);
    let a = ix.register(A, &toks(0..8), None); // blocks a0 <- a1
    let b = ix.register(A, &toks(100..108), None); // b0 <- b1
    ix.lookup(A, &toks(0..9)); // a is used more recently than b
    let c = ix.register(A, &toks(200..204), None);
    // b1 was the oldest leaf.
    assert_eq!(c.evicted, vec![b.chain[1]]);
    let d = ix.register(A, &toks(300..304), None);
    // Then b0, now a leaf and older than a's blocks.
    assert_eq!(d.evicted, vec![b.chain[0]]);
    assert_eq!(ix.lookup(A, &toks(0..9)).blocks, a.chain);
    assert_eq!(ix.lookup(A, &toks(100..109)).tokens, 0);
}

#[test]
fn blocks_in_use_are_never_evicted_and_a_full_cache_stops_registering() {
    let mut ix = PrefixIndex::new(B, 2, 1.0);
    let a = ix.register(A, &toks(0..8), None);
    ix.acquire(&a.chain);
    let b = ix.register(A, &toks(100..108), None);
    assert!(b.created.is_empty() && b.evicted.is_empty());
    assert_eq!(ix.evict(5), Vec::<BlockId>::new());
    ix.release(&a.chain);
    let b = ix.register(A, &toks(100..108), None);
    assert_eq!(b.created.len(), 2);
    assert_eq!(b.evicted.len(), 2);
}

#[test]
fn registering_a_chain_never_evicts_its_own_head() {
    // Room for two blocks and a chain of three: the third finds only its own chain idle.
    let mut ix = PrefixIndex::new(B, 2, 1.0);
    let r = ix.register(A, &toks(0..12), None);
    assert_eq!(r.chain.len(), 2);
    assert!(r.evicted.is_empty());
    assert_eq!(ix.lookup(A, &toks(0..12)).tokens, 8);
}

#[test]
fn one_scopes_flood_cannot_evict_every_other_scopes_blocks() {
    // Half the cache each at most once the cache is full.
    let mut ix = PrefixIndex::new(B, 8, 0.5);
    let b = ix.register(OTHER, &toks(0..12), None); // 3 blocks of the quiet tenant
    for i in 0..40u32 {
        let start = 1000 + i * 100;
        ix.register(A, &toks(start..start + 4), None);
    }
    assert_eq!(
        ix.held_by(A),
        5,
        "the flood takes every block left free, no more"
    );
    assert_eq!(ix.lookup(OTHER, &toks(0..13)).blocks, b.chain);
    // Below its share, a scope may take an idle block of another's.
    let mut ix = PrefixIndex::new(B, 8, 0.5);
    ix.register(OTHER, &toks(0..32), None);
    let r = ix.register(A, &toks(1000..1004), None);
    assert_eq!(r.evicted.len(), 1);
}

#[test]
fn evicting_for_admission_takes_unused_leaves_oldest_first() {
    let mut ix = PrefixIndex::new(B, 8, 1.0);
    let a = ix.register(A, &toks(0..8), None);
    let b = ix.register(OTHER, &toks(0..4), None);
    ix.acquire(&b.chain);
    assert_eq!(ix.evict(10), vec![a.chain[1], a.chain[0]]);
    assert!(ix.lookup(A, &toks(0..9)).blocks.is_empty());
    assert_eq!(ix.len(), 1);
    assert_eq!(ix.stats().evictions, 2);
}

#[test]
fn a_zero_capacity_cache_holds_nothing() {
    let mut ix = PrefixIndex::new(B, 0, 1.0);
    assert!(ix.register(A, &toks(0..16), None).created.is_empty());
    assert_eq!(ix.lookup(A, &toks(0..16)).tokens, 0);
}

#[test]
fn an_empty_or_one_token_prompt_hits_nothing() {
    let mut ix = PrefixIndex::new(B, 8, 1.0);
    ix.register(A, &toks(0..8), None);
    assert_eq!(ix.lookup(A, &[]).tokens, 0);
    assert_eq!(ix.lookup(A, &[0]).tokens, 0);
}

#[test]
fn forgetting_a_block_takes_its_descendants_and_nothing_else() {
    let mut ix = PrefixIndex::new(B, 16, 1.0);
    let a = ix.register(A, &toks(0..16), None);
    let b = ix.register(
        A,
        &toks(0..4).into_iter().chain(50..54).collect::<Vec<_>>(),
        None,
    );
    ix.acquire(&a.chain);
    let mut gone = ix.forget(&[a.chain[1]]);
    gone.sort();
    assert_eq!(gone, vec![a.chain[1], a.chain[2], a.chain[3]]);
    assert_eq!(ix.lookup(A, &toks(0..17)).blocks, vec![a.chain[0]]);
    assert_eq!(
        ix.lookup(A, &[0, 1, 2, 3, 50, 51, 52, 53, 9]).blocks,
        b.chain
    );
    ix.release(&a.chain); // releasing forgotten blocks is harmless
    assert_eq!(ix.len(), 2);
}

#[test]
fn a_holding_registration_stops_at_blocks_another_sequence_cached_meanwhile() {
    let mut ix = PrefixIndex::new(B, 16, 1.0);
    // Sequence 1 started from nothing; sequence 2 cached the same first two blocks meanwhile.
    let other = ix.register(A, &toks(0..8), None);
    let r = ix.register(A, &toks(0..16), Some(0));
    assert!(r.chain.is_empty() && r.created.is_empty(), "{r:?}");
    // Started from the first block (its own hit): that one counts, the next found one ends it.
    let r = ix.register(A, &toks(0..16), Some(1));
    assert_eq!(r.chain, other.chain[..1].to_vec());
    // Past what others cached, its own blocks are created as usual.
    let r = ix.register(A, &toks(0..16), Some(2));
    assert_eq!(
        r.created.iter().map(|c| c.1).collect::<Vec<_>>(),
        vec![2, 3]
    );
}
