//! KV memory accounted in fixed-size blocks of positions drawn from one pool: a sequence
//! takes the blocks its prompt and `max_tokens` need when it is admitted and gives them
//! back when it ends, so a request waits in the queue until its memory is free instead of
//! failing mid-stream. Each sequence's cache holds exactly its blocks' positions.

/// A pool of `total` blocks of `block_size` positions each.
#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    total: usize,
    used: usize,
}

/// Blocks held by one sequence; returned with [`BlockPool::give_back`].
#[derive(Debug)]
#[must_use = "blocks not given back stay counted as in use"]
pub struct Blocks {
    count: usize,
}

impl Blocks {
    /// How many blocks these are.
    pub fn count(&self) -> usize {
        self.count
    }
}

impl BlockPool {
    /// A pool of `total` blocks of `block_size` (≥ 1) positions.
    pub fn new(block_size: usize, total: usize) -> Self {
        assert!(block_size > 0, "a block holds at least one position");
        BlockPool { block_size, total, used: 0 }
    }

    /// Blocks that `positions` positions fill.
    pub fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_size)
    }

    /// Positions that `blocks` blocks hold.
    pub fn positions(&self, blocks: &Blocks) -> usize {
        blocks.count * self.block_size
    }

    /// The blocks for `positions` positions, or `None` while too few are free.
    pub fn try_take(&mut self, positions: usize) -> Option<Blocks> {
        let count = self.blocks_for(positions);
        (self.used + count <= self.total).then(|| {
            self.used += count;
            Blocks { count }
        })
    }

    /// Returns a sequence's blocks to the pool.
    pub fn give_back(&mut self, blocks: Blocks) {
        self.used -= blocks.count;
    }

    /// Blocks held by sequences now.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_taken_whole_and_come_back() {
        let mut pool = BlockPool::new(16, 4);
        assert_eq!(pool.blocks_for(0), 0);
        assert_eq!(pool.blocks_for(17), 2);
        let a = pool.try_take(17).unwrap();
        assert_eq!((a.count(), pool.positions(&a), pool.used()), (2, 32, 2));
        let b = pool.try_take(32).unwrap();
        assert!(pool.try_take(1).is_none(), "the pool is full");
        pool.give_back(a);
        pool.give_back(b);
        assert_eq!(pool.used(), 0);
        assert!(pool.try_take(64).is_some() && pool.try_take(1).is_none());
    }
}
