"""A small set of real English prompts, written for attndyn (no network, no data files).

Each is a paragraph of plain prose, long enough (at least 64 tokens with the SmolLM2 tokenizer) for
the attention-sink protocol of Gu et al. (ICLR 2025), which reads sinks on prompts of 64 tokens or
more. Users pass their own file with ``--prompts`` (one prompt per paragraph, blank-line separated).
"""

from pathlib import Path

PROMPTS = (
    "The river rose slowly through the night, and by morning the low fields on the eastern bank were under a thin sheet of "
    "brown water. Farmers walked the levee with lanterns, counting the sandbags and arguing about whether the old bridge would "
    "hold. Nobody slept much. When the sun came up, the water had stopped rising, and a heron stood in the flooded orchard as "
    "if it had always lived there.",
    "A good experiment begins with a question small enough to answer. You decide in advance what you will measure, how often, "
    "and what result would prove you wrong. Then you write it down, because memory is generous to the people who own it. Most "
    "of the work is boring: cleaning the glassware, checking the scale, repeating the same reading until the numbers stop "
    "drifting. The surprise, when it comes, arrives quietly.",
    "The library closed at nine, but the reading room on the top floor stayed warm long after the lights went out. Students "
    "left their coats on the chairs to keep their places, and the cleaner, who had worked there for thirty years, never moved "
    "them. She said the building remembered who came back. On exam nights she left the radiator valve open a little wider and "
    "pretended not to notice the sandwiches hidden under the desks.",
    "To bake bread you need flour, water, salt and time. Mix the flour and water until no dry patches remain, and let the "
    "dough rest for half an hour before you add the salt. Fold it every thirty minutes during the first two hours, then leave "
    "it alone until it has nearly doubled. Shape it gently, proof it overnight in the cold, and bake it in a very hot oven "
    "with steam for the first twenty minutes.",
    "In the early days of the railway, every town kept its own time, set by the sun at noon. A train that left one city at "
    "ten o'clock could arrive in the next at a time that seemed to run backwards. Timetables were printed with columns of "
    "corrections, and passengers missed connections that existed only on paper. It took decades of complaints, conferences "
    "and quarrels before the railways agreed to share a single clock across the country.",
    "The city council met on Tuesday to discuss the new bus routes. Residents of the northern districts asked for more "
    "frequent service in the evenings, when many of them travel home from late shifts. The transport office replied that the "
    "budget allowed either more buses or longer routes, but not both. After two hours of debate the council voted to run a "
    "six month trial and to publish the passenger counts every week on its website.",
    "Bees find their way home by the sun, even on cloudy days, because they can see the pattern of polarized light in a "
    "patch of blue sky. A forager that discovers a rich field of flowers returns to the hive and dances on the comb. The angle "
    "of the dance tells the others the direction to fly, measured from the sun, and the length of the waggling run tells them "
    "how far. Within an hour the field is busy with sisters.",
    "My grandfather kept a notebook of every repair he made on the farm: the date, the tool, the part, and what had gone "
    "wrong. When he died we found forty of them in a biscuit tin under the stairs. Reading them is like reading the weather "
    "of a whole life. There are years of broken fences and frozen pipes, a summer when the tractor failed three times, and "
    "one page that says only: fixed the gate, finally.",
    "A map is always a choice about what to leave out. A sailor needs depths and lighthouses, a hiker needs contour lines and "
    "springs, and a city planner needs sewers and property boundaries that no visitor will ever see. The same coastline "
    "drawn for each of them looks like three different places. The best maps admit what they ignore, in a small box in the "
    "corner that almost nobody reads.",
    "The orchestra tuned for a long time that evening because the hall was cold and the strings kept slipping. The conductor "
    "waited with her hands folded, listening to each section in turn. When she finally raised the baton the room went so "
    "quiet that you could hear the rain on the roof. The first notes came from the cellos, low and uncertain, and then the "
    "violins answered as if they had been waiting all winter.",
    "Learning a language as an adult is mostly a matter of tolerating embarrassment. You will order the wrong dish, greet "
    "your neighbour with the word for towel, and confuse the past tense with the future for months. People are kinder about "
    "this than you expect. The trick is to keep talking anyway, to write down the sentences that surprised you, and to read "
    "children's books without shame, since they were written to teach exactly this.",
    "The storm reached the coast just after midnight. Wind pulled tiles from the roofs along the harbour, and the fishing "
    "boats, tied two and three deep, knocked against each other until dawn. By six the worst had passed. People came out in "
    "boots to look at the damage, carrying brooms and coffee, and the baker opened an hour early because, he said, nobody "
    "should clear a street on an empty stomach.",
)


MAX_PROMPT_BYTES = 4 << 20


# A held-out set, written after the findings on PROMPTS were read, in other registers (instructions,
# dialogue, description, argument): the findings are reported on both sets.
HELD_OUT = (
    "Before you paint a wall, wash it with warm water and a little soap, and let it dry for a full day. Fill the cracks with "
    "filler, sand them flat once they have hardened, and wipe the dust away with a damp cloth. Cover the floor and the edges of "
    "the windows. Start at the top corner and work down in wide, overlapping strokes, and do not go back over paint that has "
    "begun to dry.",
    '"Did you lock the back door?" she asked, already halfway down the stairs. He said he thought so, which meant he had not. '
    "They stood in the hall for a moment, each waiting for the other to go and check. Outside, a car went past slowly, its "
    "lights sweeping across the ceiling. In the end they both went, and found the door wide open and the cat asleep on the "
    "step, as if guarding it.",
    "The valley is narrow at its mouth and opens, after an hour's walk, into a wide bowl of meadows ringed by grey cliffs. A "
    "stream runs down the middle, shallow enough to cross on stones in late summer. Shepherds once kept their flocks here "
    "through the warm months, and the ruins of their stone huts still stand near the spring, roofless, with nettles growing "
    "where the fires used to be.",
    "Some people argue that cities should ban cars from their centres entirely. The case is simple: cleaner air, quieter "
    "streets and more room for people on foot. The objections are practical. Deliveries still have to reach the shops, "
    "elderly residents need to get to the doctor, and businesses fear that customers will go elsewhere. Most cities that "
    "have tried it began with a few streets and widened the area year by year.",
    "The old clock in the station hall had stopped at twenty past four, and nobody could remember when. Travellers set "
    "their watches by the screens now, and the clock had become a place to meet rather than a way to tell the time. "
    "Couples waited under it, tourists photographed it, and once a year a man from the council climbed a ladder, dusted "
    "its face and climbed down again without touching the hands.",
    "Photosynthesis turns light into the chemical energy that nearly all life depends on. In the leaves of a plant, "
    "chlorophyll absorbs red and blue light and uses its energy to split water, releasing oxygen. The hydrogen and the "
    "energy are then used to turn carbon dioxide from the air into sugars. A single large tree can release enough oxygen "
    "in a season to supply several people for a year.",
)


def read_prompts(path: str | Path) -> list[str]:
    """Prompts from a text file: paragraphs separated by blank lines (lines of one paragraph joined).

    The file must be a regular file (a FIFO or a device such as /dev/zero is refused by name) of at most
    ``MAX_PROMPT_BYTES``; a prompt longer than the model's context is refused by the forward pass
    (:func:`attndyn.models.decoder.check_length`) before any work."""
    import os
    import stat

    from attndyn.core.errors import UserError

    st = os.stat(path)  # FileNotFoundError: the caller names the file
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"--prompts {str(path)!r} is not a regular file")
    if st.st_size > MAX_PROMPT_BYTES:
        raise UserError(f"--prompts {str(path)!r} has {st.st_size} bytes, more than the {MAX_PROMPT_BYTES >> 20} MiB a prompt file may have")
    text = Path(path).read_text(encoding="utf-8")
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    prompts = [p for p in paragraphs if p]
    if not prompts:
        raise UserError(f"{path} holds no prompt (paragraphs separated by blank lines)")
    return prompts
