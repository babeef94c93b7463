use super::*;
use crate::model::SeqId;

fn item<'a>(
    tokens: &'a [u32],
    logits: LogitRows,
    tree: Option<&'a [Option<usize>]>,
) -> BatchItem<'a> {
    BatchItem {
        seq: SeqId(0),
        tokens,
        logits,
        tree,
    }
}

#[test]
fn blocks_are_held_all_or_nothing_and_come_back_on_truncate_and_release() {
    let mut pool = BlockPool::new(4);
    let mut a = SeqCache::new(2);
    assert!(a.reserve(&mut pool, 33), "33 tokens take 3 blocks");
    assert_eq!((a.blocks.len(), pool.available()), (3, 1));
    let mut b = SeqCache::new(2);
    assert!(
        !b.reserve(&mut pool, 40),
        "3 blocks needed, 1 free: nothing taken"
    );
    assert_eq!((b.blocks.len(), pool.available()), (0, 1));
    a.appended(2, 33);
    a.truncate(16, &mut pool);
    assert_eq!((a.len(), a.blocks.len(), pool.available()), (16, 1, 3));
    a.release(&mut pool);
    assert_eq!((a.len(), pool.available()), (0, 4));
    let mut all: Vec<u32> = pool.free.clone();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3], "every block back once");
}

#[test]
fn an_early_exit_pass_fills_only_its_layers_and_truncate_evens_them() {
    let mut pool = BlockPool::new(8);
    let mut s = SeqCache::new(3);
    assert!(s.reserve(&mut pool, 5));
    s.appended(3, 5);
    assert!(s.reserve(&mut pool, 8));
    s.appended(1, 3);
    assert_eq!(s.layer_lens, vec![8, 5, 5]);
    s.truncate(5, &mut pool);
    assert_eq!(s.layer_lens, vec![5, 5, 5]);
    s.kept(4, 0, &mut pool);
    assert_eq!(s.layer_lens, vec![4, 4, 4]);
}

#[test]
fn a_chain_row_sees_the_cache_and_itself_at_its_own_position() {
    let items = [
        item(&[7, 8, 9], LogitRows::Last, None),
        item(&[5], LogitRows::All, None),
    ];
    let p = plan_pass(&items, &[20, 0], &[&[3, 1], &[2]]);
    assert_eq!(p.tokens, vec![7, 8, 9, 5]);
    assert_eq!(p.tables, vec![3, 1, 2]);
    assert_eq!(p.table_of_row, vec![0, 0, 0, 2]);
    assert_eq!(p.slots, vec![20, 21, 22, 0]);
    assert_eq!(p.positions, vec![20, 21, 22, 0]);
    // row 1 of item 0: table 0, base 20, limit 23, self 21, pos 21, causal
    assert_eq!(&p.info[RI_INTS..2 * RI_INTS], &[0, 20, 23, 21, 21, -1]);
    assert_eq!(&p.info[3 * RI_INTS..], &[2, 0, 1, 0, 0, -1]);
    assert!(p.masks.is_empty());
    assert_eq!(p.logit_rows, vec![2, 3]);
    assert_eq!(p.spans, vec![0..1, 1..2]);
}

#[test]
fn a_tree_row_sees_its_ancestors_at_its_depth_and_masks_span_words() {
    // pending, then node 0 under it, node 1 under node 0, node 2 under the pending token.
    let parents = [None, Some(0), None];
    let items = [item(&[1, 2, 3, 4], LogitRows::All, Some(&parents))];
    let p = plan_pass(&items, &[10], &[&[0]]);
    assert_eq!(p.positions, vec![10, 11, 12, 11]);
    assert_eq!(p.slots, vec![10, 11, 12, 13]);
    assert_eq!(p.masks, vec![0b1, 0b11, 0b111, 0b1001]);
    assert_eq!(p.info[2 * RI_INTS + 5], 2, "row 2's mask word");
    // A tree of 64 nodes needs three words per row; the last node sees row 0 and itself.
    let wide: Vec<Option<usize>> = vec![None; 64];
    let toks = vec![1u32; 65];
    let p = plan_pass(
        &[item(&toks, LogitRows::All, Some(&wide))],
        &[0],
        &[&[0, 1, 2, 3, 4]],
    );
    assert_eq!(p.masks.len(), 65 * 3);
    assert_eq!(&p.masks[64 * 3..], &[1, 0, 1]);
}

#[test]
fn a_shared_block_is_freed_by_its_last_holder_only() {
    let mut pool = BlockPool::new(4);
    let mut a = SeqCache::new(1);
    assert!(a.reserve(&mut pool, 32));
    a.appended(1, 32);
    let cached = a.blocks.clone();
    cached.iter().for_each(|&b| pool.share(b)); // the prefix cache keeps both blocks
    let mut b = SeqCache::from_shared(1, &cached, &mut pool);
    assert_eq!((b.len(), pool.available()), (32, 2));
    a.release(&mut pool);
    b.release(&mut pool);
    assert_eq!(pool.available(), 2, "the cache still holds them");
    pool.give(cached);
    assert_eq!(pool.available(), 4);
}

#[test]
fn writing_into_a_shared_block_moves_the_writer_to_a_copy() {
    let mut pool = BlockPool::new(6);
    let mut owner = SeqCache::new(1);
    assert!(owner.reserve(&mut pool, 32));
    owner.appended(1, 32);
    let cached = owner.blocks.clone();
    cached.iter().for_each(|&b| pool.share(b));
    // Appends after the shared blocks touch none of them.
    let mut seq = SeqCache::from_shared(1, &cached, &mut pool);
    assert_eq!(seq.unshare_from(32, &mut pool), Some(vec![]));
    // A rollback into the second block, then a write there: the writer gets its own copy.
    seq.truncate(20, &mut pool);
    let copies = seq.unshare_from(20, &mut pool).expect("room for a copy");
    assert_eq!(copies.len(), 1);
    assert_eq!(copies[0].0, cached[1]);
    assert_eq!(seq.blocks, vec![cached[0], copies[0].1]);
    assert!(
        pool.is_shared(cached[0]) && pool.is_shared(cached[1]),
        "the cache and the owner keep theirs"
    );
    // The owner writes into its own (now shared) blocks the same way.
    owner.truncate(5, &mut pool);
    let copies = owner.unshare_from(5, &mut pool).expect("room");
    assert_eq!(
        copies.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![cached[0]]
    );
    // With no free block, nothing changes.
    let mut full = BlockPool::new(1);
    let mut s = SeqCache::new(1);
    assert!(s.reserve(&mut full, 16));
    full.share(s.blocks[0]);
    let before = s.clone();
    assert_eq!(s.unshare_from(0, &mut full), None);
    assert_eq!(s, before);
}
