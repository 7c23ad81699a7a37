import threading

import pytest

from bryo_pytree import BoundedCache


def test_the_cache_is_bounded_and_drops_the_least_recently_used():
    cache: BoundedCache[int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now the most recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c"), len(cache)) == (1, None, 3, 2)
    cache.put("a", 4)  # replaced, and the most recently used again
    cache.put("d", 5)
    assert (cache.get("a"), cache.get("c"), cache.get("d")) == (4, None, 5)
    cache.clear()
    assert len(cache) == 0 and cache.get("a") is None


def test_a_cache_holds_at_least_one_entry():
    with pytest.raises(ValueError, match="at least 1 entry; got size=0"):
        BoundedCache(0)


def test_threads_share_a_cache_within_its_bound():
    cache: BoundedCache[int] = BoundedCache(64)

    def work(offset: int) -> None:
        for i in range(2000):
            cache.put((offset, i % 100), i)
            cache.get((offset, (i * 7) % 100))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(cache) == 64
