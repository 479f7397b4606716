#!/usr/bin/env python3
"""Drive a running `lserve serve` with the official `openai` client (tests/serve_openai.rs runs
this): chat and completions, streamed and not, usage counts, errors as the client's exception
types, and N concurrent streams whose greedy outputs must equal the sequential ones.

usage: openai_client_test.py BASE_URL MODEL API_KEY [N_CONCURRENT]
"""
import sys
import threading

import openai
from openai import OpenAI

BASE, MODEL, KEY = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(sys.argv[4]) if len(sys.argv) > 4 else 32
MAX_TOKENS = 8

client = OpenAI(base_url=BASE, api_key=KEY, max_retries=0, timeout=600)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def chat(content, stream, **kw):
    msgs = [{"role": "user", "content": content}]
    if not stream:
        r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=MAX_TOKENS, temperature=0, **kw)
        check(r.object == "chat.completion", r)
        check(r.choices[0].message.role == "assistant", r)
        check(r.usage.completion_tokens <= MAX_TOKENS and r.usage.prompt_tokens > 0, r.usage)
        check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    s = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=MAX_TOKENS, temperature=0, stream=True,
                                       stream_options={"include_usage": True}, **kw)
    for chunk in s:
        check(chunk.object == "chat.completion.chunk", chunk)
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    return text, finish, usage


def completion(prompt, stream):
    if not stream:
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0)
        check(r.object == "text_completion", r)
        return r.choices[0].text, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    s = client.completions.create(model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stream=True,
                                  stream_options={"include_usage": True})
    for chunk in s:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            finish = c.finish_reason or finish
    return text, finish, usage


def main():
    models = client.models.list()
    check([m.id for m in models.data] == [MODEL], models)

    # Chat and completion, streamed and not: the same greedy text, finish reason and usage.
    for fn, arg in [(chat, "What is the capital of France?"), (completion, "The three primary colors are")]:
        plain = fn(arg, False)
        streamed = fn(arg, True)
        check(plain == streamed, f"{fn.__name__}: streamed {streamed!r} != plain {plain!r}")
        check(plain[1] in ("stop", "length") and plain[0], plain)
        print(f"{fn.__name__}: {plain[0]!r} ({plain[1]}, {plain[2].completion_tokens} tokens)")

    # Stop strings and seeds.
    text, finish, _ = completion("1, 2, 3, 4, 5, 6,", False)
    r = client.completions.create(model=MODEL, prompt="1, 2, 3, 4, 5, 6,", max_tokens=MAX_TOKENS, temperature=0,
                                  stop=[text.strip()[:1]] if text.strip() else ["7"])
    check(r.choices[0].finish_reason in ("stop", "length"), r)
    a = client.completions.create(model=MODEL, prompt="Once", max_tokens=MAX_TOKENS, temperature=1.0, seed=42)
    b = client.completions.create(model=MODEL, prompt="Once", max_tokens=MAX_TOKENS, temperature=1.0, seed=42)
    check(a.choices[0].text == b.choices[0].text, "same seed, same sample")

    # Errors arrive as the client's exception types with OpenAI-style bodies.
    for kw, exc, param in [({"n": 2}, openai.BadRequestError, "n"), ({"max_tokens": -1}, openai.BadRequestError, "max_tokens"),
                           ({"model": "no-such-model"}, openai.NotFoundError, "model")]:
        args = {"model": MODEL, "prompt": "x", "max_tokens": 4, **kw}
        try:
            client.completions.create(**args)
            raise AssertionError(f"{kw} was accepted")
        except exc as e:
            check(e.body["param"] == param and e.body["type"] == "invalid_request_error", e.body)
    try:
        OpenAI(base_url=BASE, api_key="wrong", max_retries=0).models.list()
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass

    # N concurrent streams against the sequential greedy outputs.
    prompts = [f"Question {i}: name one fact about the number {i * 7 + 3}." for i in range(N)]
    sequential = [chat(p, False)[0] for p in prompts]
    results = [None] * N
    errors = []

    def worker(i):
        try:
            results[i] = chat(prompts[i], True)[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{i}: {e!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not errors, errors)
    diff = [i for i in range(N) if results[i] != sequential[i]]
    check(not diff, "concurrent != sequential for " + "; ".join(f"{i}: {results[i]!r} vs {sequential[i]!r}" for i in diff))
    print(f"{N} concurrent streams equal the sequential outputs")
    print("OK")


if __name__ == "__main__":
    main()
