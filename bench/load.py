"""Load test of `kiln serve` (standard library only): N streamed /v1/completions requests
sent over T seconds at an even rate, each on its own thread, to a server on this machine
(loopback addresses only). Prints p50 / p99 time to first token, inter-token latency and
whole-request time, the tokens/s over the run, and the requests lost (an error, a status
other than 200, or a stream without [DONE]); 503s (queue full) are counted apart.

    python3 bench/load.py --url http://127.0.0.1:8080 -n 64 -t 10 --max-tokens 64
"""
import argparse, http.client, ipaddress, json, socket, threading, time
from urllib.parse import urlsplit


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def is_loopback(host):
    try:
        return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
    except (socket.gaierror, ValueError):
        return False


def one_request(host, port, body, timeout, result):
    """Sends one streamed completion; fills result with its timings and outcome."""
    t0 = time.perf_counter()
    arrivals = []
    try:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        result["status"] = resp.status
        if resp.status != 200:
            resp.read()
            return
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                result["done"] = True
                break
            chunk = json.loads(data)
            if chunk["choices"] and chunk["choices"][0].get("text"):
                arrivals.append(time.perf_counter())
        conn.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        result["error"] = repr(e)
    finally:
        result["total"] = time.perf_counter() - t0
        if arrivals:
            result["ttft"] = arrivals[0] - t0
            result["gaps"] = [b - a for a, b in zip(arrivals, arrivals[1:])]
            result["pieces"] = len(arrivals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("-n", "--requests", type=int, default=32, help="requests to send (at most 10000)")
    ap.add_argument("-t", "--seconds", type=float, default=10.0, help="spread the sends over this long (at most 600)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    a = ap.parse_args()
    u = urlsplit(a.url)
    host, port = u.hostname or "127.0.0.1", u.port or 80
    if not is_loopback(host):
        raise SystemExit(f"refusing {host}: load tests only go to this machine's loopback addresses")
    n, span = max(1, min(a.requests, 10000)), max(0.0, min(a.seconds, 600.0))
    body = json.dumps({"prompt": a.prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True})
    results = [dict() for _ in range(n)]
    threads = []
    start = time.perf_counter()
    for i in range(n):
        delay = start + i * span / n - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one_request, args=(host, port, body, a.timeout, results[i]), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.perf_counter() + a.timeout
    for t in threads:
        t.join(max(0.0, deadline - time.perf_counter()))
    wall = time.perf_counter() - start

    ok = [r for r in results if r.get("status") == 200 and r.get("done")]
    busy = sum(r.get("status") == 503 for r in results)
    lost = n - len(ok) - busy
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    gaps = [g for r in ok for g in r.get("gaps", [])]
    totals = [r["total"] for r in ok]
    pieces = sum(r.get("pieces", 0) for r in ok)
    ms = lambda xs, p: percentile(xs, p) * 1e3
    print(f"{n} requests over {span:.1f} s to {host}:{port}, max_tokens {a.max_tokens}: "
          f"{len(ok)} complete, {busy} answered 503, {lost} lost; wall {wall:.2f} s")
    print(f"time to first token  p50 {ms(ttft, 50):8.1f} ms  p99 {ms(ttft, 99):8.1f} ms")
    print(f"inter-token latency  p50 {ms(gaps, 50):8.1f} ms  p99 {ms(gaps, 99):8.1f} ms")
    print(f"request time         p50 {ms(totals, 50):8.1f} ms  p99 {ms(totals, 99):8.1f} ms")
    print(f"streamed text pieces {pieces} = {pieces / wall:.1f} per second over the run")
    for r in results:
        if r.get("error"):
            print("first error:", r["error"])
            break


if __name__ == "__main__":
    main()
