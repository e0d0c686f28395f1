"""Readable generated text for the simulated model's replies.

A simulated model still has to "say" something: tokens that decode to plain,
readable English make streamed output look plausible in the UI and make
detokenization, stop strings and byte counts behave as they would for a real
model, without any model weights. The text below is original prose written for
this project on neutral topics.

``TextStream(seed)`` yields token ids from the built-in corpus, starting at a
seed-dependent paragraph and sentence and cycling through the paragraphs forever in
a seed-dependent order, so the same request seed always produces the same reply and
different seeds produce different ones. Every word of the corpus is in the
tokenizer's vocabulary (``sparksim.tokenizer`` adds the corpus pieces to it), so the
stream never yields byte-fallback ids.

``TextStream(seed, kind="reasoning")`` draws instead from short "thinking"-style
sentences, for models that stream reasoning before the answer.

``TextStream(seed, kind="markdown")`` is the demo mode's answer (``--answers markdown``):
whole Markdown blocks (headings, lists, tables, fenced code, math) separated by blank
lines, so that the panel's chat has everything it renders to show. Their pieces join the
tokenizer's vocabulary after the prose's, so the prose's ids never move.

Randomness comes from ``random.Random(seed)`` with an integer seed and from
``stream_seed`` (a BLAKE2b digest), never from ``hash()``, so streams are identical
across processes and runs.
"""

from __future__ import annotations

import hashlib
import random
import weakref

from sparksim.tokenizer import DEFAULT_TOKENIZER, Tokenizer

PARAGRAPHS: tuple[str, ...] = (
    # Memory bandwidth and LLM inference.
    "When a language model writes an answer, it produces one token at a time. For every "
    "new token the processor has to read all of the model weights from memory, multiply "
    "them with a small vector, and write back a few numbers. The arithmetic is quick, but "
    "moving the weights is not. That is why decoding speed is usually limited by memory "
    "bandwidth rather than by raw compute, and why a smaller or quantized model often "
    "feels so much faster.",
    "A useful rule of thumb is to divide the memory bandwidth by the size of the weights. "
    "If a machine can move about two hundred and seventy gigabytes per second and the "
    "model takes sixty gigabytes, the upper limit is a little over four full passes per "
    "second for a single request. Real systems reach a good fraction of that limit, but "
    "never all of it, because there is always some overhead in the kernels and the "
    "scheduler.",
    "Batching is the trick that turns a slow single stream into a fast server. The "
    "weights are read once per step no matter how many requests share that step, so "
    "eight requests decoding together cost only a little more than one. Each request "
    "still waits for the whole batch, which means the latency of a single stream grows "
    "slowly while the total throughput of the server grows much faster.",
    "The key and value cache stores what the model has already computed for earlier "
    "tokens, so that each new token only has to attend to saved results instead of "
    "recomputing the whole context. The cache grows with every token of every active "
    "request. When it runs out of room, the scheduler has to pause a request, free its "
    "blocks, and compute them again later, which is called a preemption.",
    "Prefill and decode behave very differently. During prefill the model reads the "
    "whole prompt at once, and thousands of tokens can be processed in a single step, so "
    "the work is limited by compute. During decode only one new token per request is "
    "produced in each step, and the work is limited by memory. A good scheduler mixes "
    "the two so that neither the compute units nor the memory system sits idle.",
    "Quantization stores each weight in fewer bits. Moving from sixteen bit numbers to "
    "eight bits halves the amount of data that has to cross the memory bus, and four bit "
    "formats halve it again. The model loses a small amount of precision, but for most "
    "tasks the answers stay almost the same, and the speed of decoding improves in "
    "nearly direct proportion to the smaller size.",
    "Time to first token measures how long a user waits before anything appears on the "
    "screen. It includes the time spent in the queue, the time to process the prompt, "
    "and the time to produce the first output token. Long prompts make it larger, and so "
    "does a busy server, because a new request may have to wait until there is room in "
    "the cache and a free slot in the batch.",
    "Prefix caching helps when many requests begin with the same text, such as a long "
    "system prompt or a shared document. The server keeps the cache blocks for that "
    "common beginning and reuses them, so the next request only has to process the part "
    "that is new. The hit rate tells you how many prompt tokens were served from the "
    "cache instead of being computed again.",
    "A desktop machine with a single large pool of unified memory can hold models that "
    "would not fit on a typical graphics card. The processor and the graphics unit share "
    "the same memory, which makes loading simple and avoids copies. The cost is that the "
    "shared memory is slower than the special memory on a large data center card, so "
    "careful choices about model size and batch size matter more.",
    "Measuring a server honestly takes some care. The first request after a restart is "
    "often slow because kernels are compiled and caches are warmed, so a short warm up "
    "request should come before any timing. After that it helps to repeat each test a "
    "few times, report the median as well as the worst case, and write down every "
    "setting that was used, so that the results can be compared later.",
    "Speculative decoding lets a small draft model guess several tokens ahead, while the "
    "large model checks all of those guesses in one step. When the guesses are right, "
    "several tokens are accepted for the cost of a single pass over the large weights. "
    "When they are wrong, the work is thrown away and decoding continues as usual, so "
    "the output is the same either way.",
    "Context length is a budget shared by the prompt and the answer. A model that "
    "accepts thirty two thousand tokens cannot read a prompt of that size and still "
    "write a long reply. The server checks the sum of the prompt and the maximum number "
    "of new tokens before it accepts a request, and it refuses requests that could never "
    "fit.",
    # Gardening.
    "Early spring is the season for planning a vegetable garden. Before any seed goes "
    "into the ground, it helps to look at where the sun falls during the day and where "
    "water collects after a storm. Most vegetables want at least six hours of direct "
    "light, loose soil that drains well, and a gardener who visits often enough to notice "
    "small problems before they become large ones.",
    "Good soil is alive. A handful of healthy garden soil holds millions of tiny "
    "creatures that break down leaves and roots into food for the next crop. Adding "
    "compost every year feeds that hidden community, improves the way the soil holds "
    "water, and makes heavy clay easier to dig. Over a few seasons the color of the "
    "ground slowly changes from pale brown to a deep, rich dark.",
    "Tomatoes reward patience. The plants need warm nights before they set fruit, so "
    "putting them out too early gains very little. A strong stake or a simple cage keeps "
    "the stems off the ground, and a layer of mulch keeps the roots cool and the leaves "
    "clean. Water deeply once or twice a week rather than a little every day, and the "
    "roots will grow down instead of staying near the surface.",
    "Beans and peas are generous crops for a small garden. They climb instead of "
    "spreading, so a simple fence or a few strings can carry a surprising harvest. Their "
    "roots also work with tiny organisms in the soil to capture nitrogen from the air, "
    "which leaves the bed a little richer for whatever is planted there next year.",
    "Herbs are the easiest way to start. A pot of basil by the kitchen door, a patch of "
    "thyme at the edge of a path, and a few stems of mint kept in their own container "
    "so they do not take over the bed will add fresh flavor to almost every meal. Most "
    "herbs prefer poor, dry soil and plenty of sun, and they grow better when they are "
    "picked often.",
    "Autumn is a quiet but important time in the garden. The last crops come in, the "
    "beds are cleared of old stems, and a thick layer of leaves or compost goes on top "
    "to protect the soil through the winter. It is also the right moment to write down "
    "what worked and what did not, while the memory of the season is still fresh.",
    # Sailing.
    "A sailboat cannot sail straight into the wind, but it can sail surprisingly close to "
    "it. By turning the bow back and forth across the wind in a series of long diagonal "
    "legs, a sailor can reach a point that lies directly upwind. Each turn is called a "
    "tack, and a good crew learns to make them smoothly, without losing much speed.",
    "Reading the water is one of the first skills a sailor learns. Dark patches that move "
    "across the surface show where a stronger gust is coming, and smooth areas often "
    "mean the wind has dropped. Watching the water ahead gives the crew a few seconds to "
    "prepare, to ease the sails or to lean out, before the boat feels the change.",
    "Tides and currents matter as much as the wind near the coast. A boat that moves at "
    "five knots through the water may make only three knots over the ground when it "
    "sails against a strong current. Careful sailors plan their trips so that the tide "
    "carries them out in the morning and back again in the afternoon.",
    "Every sailor should know a few good knots. A bowline makes a loop that will not slip "
    "and is still easy to untie after it has carried a heavy load. A clove hitch holds a "
    "line to a post for a short time, and a figure eight knot at the end of a rope keeps "
    "it from running out through a block when someone lets go.",
    "Before leaving the harbor, a careful crew checks the weather, the tide tables, and "
    "the boat itself. Life jackets should be easy to reach, the radio should work, and "
    "someone on shore should know where the boat is going and when it will be back. "
    "These habits take only a few minutes and turn most small problems into stories "
    "instead of emergencies.",
    # Cooking.
    "Bread needs only flour, water, salt, and yeast, yet the same four ingredients can "
    "become very different loaves. A wet dough left to rise slowly in a cool room "
    "develops more flavor and a more open crumb. A hot oven and a little steam during the "
    "first minutes of baking give the crust its color and its crackle as it cools.",
    "A good soup begins with patience. Onions cooked slowly in a little oil until they "
    "turn soft and golden give a deep base of flavor that no spice can replace. After "
    "that, the vegetables, the stock, and the herbs go in, and the pot is left to "
    "simmer gently. Taste near the end and adjust the salt, because it is easy to add "
    "more and impossible to take it out.",
    "Sharp knives are safer than dull ones. A dull blade slips off the skin of a tomato "
    "or an onion and goes where the cook did not intend, while a sharp one goes exactly "
    "where it is pointed. A few strokes on a honing steel before each use keep the edge "
    "straight, and a proper sharpening a few times a year restores it.",
    "Rice is simple to cook once the ratio is right. Rinse the grains until the water "
    "runs clear, add the water, bring the pot to a boil, then turn the heat down low and "
    "cover it. Leave the lid alone while it cooks, and let the pot rest for ten minutes "
    "off the heat before serving, so the steam can finish the work.",
    "Cooking for a group is mostly a matter of planning. Choose dishes that can be "
    "prepared ahead, so that the last hour is spent warming and serving rather than "
    "chopping. Write a short list of what goes into the oven and when, and leave a little "
    "extra time for everything, because guests are rarely late when the kitchen is "
    "behind.",
    # Astronomy.
    "On a clear night far from city lights, the sky holds thousands of visible stars. "
    "The pale band that crosses it is our own galaxy seen from the inside, the combined "
    "light of stars too distant to pick out one by one. A pair of ordinary binoculars "
    "reveals many more, along with star clusters and the soft glow of distant clouds of "
    "gas.",
    "The planets move against the background of the stars, which is how early observers "
    "first noticed them. Venus shines brightly near the horizon after sunset or before "
    "dawn. Jupiter is steady and bright, and even a small telescope shows its four "
    "largest moons changing places from one night to the next. Saturn and its rings "
    "never fail to surprise someone seeing them for the first time.",
    "Light from the nearest star beyond the Sun takes a little over four years to reach "
    "us. Light from the center of our galaxy left it long before the first cities were "
    "built. Looking at the night sky is therefore a kind of looking back in time, since "
    "every point of light shows an object as it was when that light began its journey.",
    "A total eclipse of the Sun happens when the Moon covers the whole bright disk and "
    "only the thin outer glow remains visible. The air turns cool, birds go quiet, and "
    "the sky darkens in the middle of the day. The shadow is narrow, so each eclipse can "
    "be seen from only a small part of the Earth, and people travel great distances to "
    "stand inside it.",
    "Astronomers rarely look through a telescope with their eyes anymore. Modern "
    "instruments collect light on sensitive digital detectors for minutes or hours at a "
    "time, and software combines many images to reveal faint details. Much of the work "
    "happens later, at a desk, where the data is cleaned, measured, and compared with "
    "what theory predicts.",
    # History of computing.
    "The first electronic computers filled entire rooms and used thousands of glass "
    "tubes that glowed and failed often. Engineers spent much of their time finding and "
    "replacing broken parts. Programs were entered by setting switches or plugging "
    "cables, and a single calculation that a modern phone finishes in a moment could "
    "keep such a machine busy for hours.",
    "The transistor changed everything. It did the work of a glass tube while using far "
    "less power and lasting far longer. Once engineers learned to place many "
    "transistors on a single small chip, the number that fit in the same area began to "
    "double every couple of years, and computers shrank from rooms to desks to pockets.",
    "Early programmers wrote instructions in the language of the machine itself, as long "
    "lists of numbers. Compilers changed that by translating programs written in a form "
    "closer to human language into those numbers automatically. The idea met some doubt "
    "at first, but the time it saved was so large that nearly every program today is "
    "written this way.",
    "Memory has always been a central problem in computer design. Processors became "
    "faster much more quickly than memory did, so designers added small, fast caches "
    "close to the processor to hold the data used most often. Much of the art of writing "
    "fast software still comes down to arranging data so that it is found in the cache "
    "instead of far away.",
    "Networks turned separate computers into a shared system. At first they linked a few "
    "university machines so that researchers could exchange files and messages. Over "
    "time the same simple ideas, small packets of data and agreed rules for passing them "
    "along, grew into a global network that carries most of the world's communication.",
    "Graphics processors were first built to draw images for games, which requires the "
    "same simple calculation to be repeated for millions of points on a screen. "
    "Researchers noticed that many scientific problems have the same shape, and the chips "
    "designed for pictures became the engines of modern machine learning, where the work "
    "is mostly large multiplications of numbers.",
    # Miscellaneous calm topics.
    "A good map is a careful set of choices about what to leave out. A map for hikers "
    "shows every small trail, stream, and change in height, while a map for drivers "
    "leaves those out and shows roads, towns, and places to stop. Neither one is more "
    "correct than the other; each is designed for a particular journey.",
    "Bees visit flowers to collect food, and in doing so they carry pollen from one "
    "plant to the next. Many fruits and vegetables depend on that work. A garden with a "
    "variety of flowers that open at different times of the year gives bees food from "
    "early spring to late autumn, and the gardener is paid back with a better harvest.",
    "Lighthouses once needed a keeper who climbed the stairs every evening to light the "
    "lamp and clean the glass. The light had to be visible far out at sea, and each "
    "lighthouse had its own pattern of flashes so that sailors could tell which one they "
    "were seeing. Today most of them run by themselves, but many still stand as quiet "
    "guides along the coast.",
    "Learning a musical instrument is mostly a matter of short, regular practice. Twenty "
    "minutes every day does more than three hours once a week, because the hands and the "
    "ear need time to absorb each small change. Playing slowly and correctly at first "
    "feels like a waste of time, but it is the fastest way to play well later.",
    "Rivers shape the land they cross. Over thousands of years a river carves its valley, "
    "carries sand and stone toward the sea, and builds wide flat plains where it slows "
    "down. Towns grew along rivers because they offered water, food, and an easy road for "
    "trade long before there were any other roads at all.",
    "A bicycle is one of the most efficient machines ever built. A rider on a simple road "
    "bike can travel several times farther than a walker for the same amount of effort. "
    "Keeping the chain clean, the tires properly filled, and the brakes adjusted takes "
    "only a little time and makes every ride safer and more pleasant.",
    "Public libraries offer something rare: a quiet place that anyone can enter without "
    "paying. Besides books, many of them lend music, films, and tools, and they offer "
    "classes, help with forms, and a warm room on a cold day. A good librarian is an "
    "expert guide to finding information, which matters more than ever when there is so "
    "much of it.",
    "Weather forecasts are built from a great many measurements taken around the world "
    "at the same time. Computers use the laws of physics to predict how the air will "
    "move over the next hours and days. Small errors grow as the forecast reaches further "
    "ahead, which is why the next two days are usually reliable and the next two weeks "
    "are only a rough guide.",
    "Chess is a game of complete information, since both players can see every piece on "
    "the board, yet it remains difficult after centuries of study. Beginners learn a few "
    "simple principles: control the center, develop the pieces early, and keep the king "
    "safe. Stronger players learn when those principles can be broken.",
    "A walk in the early morning has a character of its own. The streets are quiet, the "
    "light is low and soft, and the air still holds the cool of the night. Birds are "
    "loudest in the first hour after dawn, when each one announces its place, and a "
    "patient listener can learn to tell many of them apart by their songs alone.",
)

REASONING_SENTENCES: tuple[str, ...] = (
    "Let me check the memory budget first.",
    "The user wants a short answer, so I should keep it brief.",
    "First, I need to understand what the question is really asking.",
    "Let me think about this step by step.",
    "I should compare the prompt length with the context limit.",
    "Hmm, that does not look right, so let me check it again.",
    "The key point is that decoding is limited by memory bandwidth.",
    "Let me estimate the number of tokens per second.",
    "Wait, I should consider the size of the cache as well.",
    "I think the simplest explanation is the correct one here.",
    "Let me write down what I know so far.",
    "The next step is to check each part of the answer.",
    "That seems consistent with the numbers above.",
    "I should mention the main tradeoff clearly.",
    "Let me reconsider the second part of the question.",
    "Okay, the first part is done, so now the details.",
    "A quick example would make this easier to follow.",
    "I need to be careful not to overstate the result.",
    "Let me double check the units before going on.",
    "So the answer should start with the most important point.",
    "Actually, there is a simpler way to explain this.",
    "I will keep the explanation short and clear.",
    "Let me see whether any part of the request is unclear.",
    "The question has two parts, and I should answer both.",
    "This matches what I would expect from a busy server.",
    "Now I can put the pieces together.",
)
# The name some callers use for the same sentences.
REASONING_PREFIXES = REASONING_SENTENCES

# The demo mode's answers (`--answers markdown`): whole Markdown blocks of the kinds the
# panel's chat renders (static/js/markdown.js): headings, bulleted, nested and numbered
# lists, tables with aligned columns, fenced code with its language, block quotes, inline
# math $...$ and display math $$...$$. Original text, on the prose's topics. A block never
# holds a blank line: blocks are separated by one, as a model writes them. Inline math
# keeps the chat's rule: no space just inside a `$`, no digit right after the closing one.
MARKDOWN_BLOCKS: tuple[str, ...] = (
    "## Why decoding is memory bound\n"
    "Every new token reads all of the weights once, so a single stream can go no faster "
    "than about $t \\approx B / W$ tokens per second, where $B$ is the memory bandwidth "
    "and $W$ is the size of the weights in memory.",
    "### Weight formats on one machine\n"
    "| Format | Bits per weight | A 70B model |\n"
    "|:---|---:|---:|\n"
    "| BF16 | 16 | 140 GB |\n"
    "| FP8 | 8 | 70 GB |\n"
    "| NVFP4 | 4.5 | 40 GB |",
    "```python\n"
    "def tokens_per_second(bandwidth_gbs: float, weights_gb: float) -> float:\n"
    '    """The upper limit of one stream: every token reads every weight."""\n'
    "    return bandwidth_gbs / weights_gb\n"
    "print(round(tokens_per_second(273, 60), 1))\n"
    "```",
    "Before a long benchmark, check a few things:\n"
    "- the server has finished its warm up request\n"
    "- nothing else is running on the machine\n"
    "- the prompt and output lengths are written down\n"
    "- every setting is saved next to the results",
    "The cache of one sequence grows with its length:\n"
    "$$\n"
    "\\text{bytes} = 2 \\times L \\times H_{kv} \\times d \\times n \\times b\n"
    "$$",
    "```bash\n"
    "# ask the server which models it serves, then for a short answer\n"
    "curl -s http://localhost:8000/v1/models | python3 -m json.tool\n"
    "curl -s http://localhost:8000/v1/chat/completions \\\n"
    "  -H 'Content-Type: application/json' -d @request.json\n"
    "```",
    "```json\n"
    "{\n"
    '  "model": "demo",\n'
    '  "messages": [{"role": "user", "content": "Hello!"}],\n'
    '  "max_tokens": 256,\n'
    '  "temperature": 0.7\n'
    "}\n"
    "```",
    "To bake a simple loaf of bread:\n"
    "1. Mix the flour, water, salt and yeast into a rough dough.\n"
    "2. Let it rise slowly in a cool room until it has doubled.\n"
    "3. Shape it gently, and let it rise once more.\n"
    "4. Bake it in a hot oven with a little steam for the first minutes.",
    "### Prefix caching\n"
    "When many requests share a **long system prompt**, the server keeps its cache "
    "blocks and reuses them. It is on with `--enable-prefix-caching`, and the *hit rate* "
    "shows how much of each prompt was served from the cache.",
    "**Before leaving the harbor**\n"
    "- Weather and tides\n"
    "  - the forecast for the whole day\n"
    "  - the times of high and low water\n"
    "- Safety\n"
    "  - a life jacket for everyone on board\n"
    "  - a radio that works",
    "| Crop | Sow | Harvest |\n"
    "|:---|:---:|:---|\n"
    "| Beans | May | July to September |\n"
    "| Tomatoes | April, indoors | August |\n"
    "| Basil | May | June to September |\n"
    "| Peas | March | June |",
    "A batch of $n$ requests reads the weights once per step, so the time of a step grows "
    "slowly with the batch: roughly $t(n) \\approx t_0 + n c$, where $c$ is the small "
    "cost of one more sequence.",
    "The mean of $n$ measured runs, and how far they spread:\n"
    "$$\n"
    "\\bar{x} = \\frac{1}{n} \\sum_{i=1}^{n} x_i, \\qquad "
    "s = \\sqrt{\\frac{1}{n - 1} \\sum_{i=1}^{n} (x_i - \\bar{x})^2}\n"
    "$$",
    "> Measure twice and cut once. The old rule of the workshop holds for benchmarks "
    "as well: a test that was not written down cannot be repeated.",
    "## Three things to find on a clear night\n"
    "1. The Moon, best a few days after the new moon, when shadows mark its craters.\n"
    "2. Jupiter, with its four largest moons in a line beside it.\n"
    "3. The pale band of our own galaxy, far from the lights of any city.",
    "```python\n"
    "from statistics import median\n"
    "runs = [41.8, 42.3, 40.9, 42.0]\n"
    'print(f"median: {median(runs):.1f} tokens/s over {len(runs)} runs")\n'
    "```",
    "```yaml\ngarden:\n  beds: 4\n  crops: [tomatoes, beans, basil]\n  water_per_week_l: 30\n```",
    "### Speculative decoding\n"
    "A small draft model guesses $k$ tokens ahead and the large model checks them all in "
    "one step. When each guess is accepted with probability $p$, one step yields on average\n"
    "$$\n"
    "\\frac{1 - p^{k+1}}{1 - p}\n"
    "$$\n"
    "tokens instead of one, and the output stays exactly the same.",
)

KINDS = ("answer", "reasoning", "markdown")
# What a server answers with (`--answers`): the prose above, or the Markdown demo blocks.
ANSWER_STYLES = ("prose", "markdown")


def all_texts() -> tuple[str, ...]:
    """The prose texts of the corpus; the tokenizer adds their pieces to its vocabulary."""
    return PARAGRAPHS + REASONING_SENTENCES


def markdown_texts() -> tuple[str, ...]:
    """The Markdown demo blocks; the tokenizer adds their pieces after the prose's, so
    that they move no id the prose and prompts had before."""
    return MARKDOWN_BLOCKS


def stream_seed(*parts: str | int) -> int:
    """A stable 64-bit seed from request parts, e.g. ``stream_seed(model, prompt, n)``.

    Built on BLAKE2b, not ``hash()``, which is salted per process for strings. Each
    part is tagged with its type and length so that ``("ab", "c")``, ``("a", "bc")``
    and ``("1",)`` versus ``(1,)`` all give different seeds.
    """
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, int | str):
            raise TypeError(f"stream_seed parts must be str or int, not {type(part).__name__}")
        tag = b"i" if isinstance(part, int) else b"s"
        data = str(part).encode("utf-8", "surrogatepass")
        digest.update(tag + len(data).to_bytes(8, "big") + data)
    return int.from_bytes(digest.digest(), "big")


# Units (paragraphs or sentences) pre-encoded per tokenizer, split at sentence starts:
# tokenizer -> kind -> list of units -> list of sentences -> ids.
_ENCODED: weakref.WeakKeyDictionary[Tokenizer, dict[str, list[list[list[int]]]]] = (
    weakref.WeakKeyDictionary()
)


def _split_sentences(paragraph: str) -> list[str]:
    # Each sentence keeps its leading space, so concatenating them gives the paragraph.
    sentences: list[str] = []
    start = 0
    for i, ch in enumerate(paragraph):
        if ch in ".?!" and paragraph[i + 1 : i + 2] == " ":
            sentences.append(paragraph[start : i + 1])
            start = i + 1
    sentences.append(paragraph[start:])
    return [s for s in sentences if s]


def _encoded_units(tokenizer: Tokenizer, kind: str) -> list[list[list[int]]]:
    per_kind = _ENCODED.get(tokenizer)
    if per_kind is None:
        per_kind = {}
        _ENCODED[tokenizer] = per_kind
    units = per_kind.get(kind)
    if units is None:
        if kind == "answer":
            # Paragraphs are separated by a blank line, as a model writes them.
            units = [
                [tokenizer.encode(s) for s in _split_sentences(p)] + [tokenizer.encode("\n\n")]
                for p in PARAGRAPHS
            ]
        elif kind == "markdown":
            # A block is one piece (a stream never starts inside a table or a code fence),
            # then the blank line that separates it from the next.
            units = [[tokenizer.encode(b), tokenizer.encode("\n\n")] for b in MARKDOWN_BLOCKS]
        else:
            # Leading space: a sentence follows the previous one on the same line.
            units = [[tokenizer.encode(" " + s)] for s in REASONING_SENTENCES]
        per_kind[kind] = units
    return units


class TextStream:
    """An endless, deterministic stream of token ids of readable English text (or, with
    ``kind="markdown"``, of whole Markdown blocks)."""

    def __init__(
        self, seed: int, tokenizer: Tokenizer = DEFAULT_TOKENIZER, *, kind: str = "answer"
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self._rng = random.Random(seed)  # noqa: S311 - reproducible text, not a secret
        self._units = _encoded_units(tokenizer, kind)
        self._order: list[int] = []
        self._buffer: list[int] = []
        self._pos = 0
        self._refill_order()
        first = self._units[self._order.pop()]
        if kind == "markdown":
            self._buffer = [tid for piece in first for tid in piece]  # from the block's start
        else:
            # Start at a seed-dependent sentence of the first unit (never mid-sentence,
            # and never on the trailing blank line), without the space that separates it
            # from the sentence before.
            skip = self._rng.randrange(len(first) - 1) if len(first) > 1 else 0
            head = tokenizer.encode(tokenizer.decode(first[skip]).lstrip(" "))
            self._buffer = head + [tid for sentence in first[skip + 1 :] for tid in sentence]
        # The lengths of the stream's first units, for unit_ends (next_ids pops the order),
        # and of the blank line that ends each (reasoning sentences have none).
        self._upcoming = [len(self._buffer)] + [
            sum(map(len, self._units[i])) for i in reversed(self._order)
        ]
        self._gap = 0 if kind == "reasoning" else len(tokenizer.encode("\n\n"))

    def unit_ends(self, count: int) -> list[int]:
        """Where the stream's first ``count`` units (paragraphs, blocks) end, in tokens
        from its start, before the blank line after each: a reply that stops at one ends
        on a whole block. At most one pass over the corpus."""
        ends, at = [], 0
        for length in self._upcoming[:count]:
            at += length
            ends.append(at - self._gap)
        return ends

    def _refill_order(self) -> None:
        order = list(range(len(self._units)))
        self._rng.shuffle(order)
        self._order = order

    def next_ids(self, n: int) -> list[int]:
        """The next ``n`` token ids; the stream never ends."""
        if n < 0:
            raise ValueError("n must be >= 0")
        out: list[int] = []
        while len(out) < n:
            if self._pos >= len(self._buffer):
                if not self._order:
                    self._refill_order()
                unit = self._units[self._order.pop()]
                self._buffer = [tid for sentence in unit for tid in sentence]
                self._pos = 0
            take = min(n - len(out), len(self._buffer) - self._pos)
            out += self._buffer[self._pos : self._pos + take]
            self._pos += take
        return out
