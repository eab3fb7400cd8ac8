"""Prompt cleaning and tokenization as Wan's pipelines do them, and the tiny
SentencePiece model the test data uses.

    sp = load("spiece.model")
    ids, mask = tokenize(sp, "a cat &amp; a dog")   # int64 [512] each, EOS last real id, 0-padded

clean(): [W] wan/modules/tokenizers.py and diffusers' prompt_clean, less
ftfy.fix_text: html.unescape twice, strip, every run of whitespace (Python's
Unicode \\s, so U+00A0 from &nbsp; too) to one space, strip.
tokenize(): T5TokenizerFast(add_special_tokens=True, padding="max_length",
truncation=True, max_length=512): the SentencePiece ids, cut to 511, then
</s> (id 1); pad id 0; mask 1 on the real ids, EOS included.

train_tiny_tokenizer(): a ~500-piece unigram model trained with spm_train on
CORPUS, T5's special ids (pad 0, eos 1, unk 2, no bos), one thread and fixed
relative paths so the bytes are the same every run.
"""
import html
import os
import re
import shutil
import subprocess
import tempfile

import numpy as np
import sentencepiece

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2
MAX_LENGTH = 512


def clean(text):
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def load(path):
    return sentencepiece.SentencePieceProcessor(model_file=path)


def token_ids(sp, text, max_length=MAX_LENGTH):
    """The real ids: SentencePiece's of the cleaned text, cut to make room for EOS, then EOS."""
    return sp.encode(clean(text), out_type=int)[:max_length - 1] + [EOS_ID]


def tokenize(sp, text, max_length=MAX_LENGTH):
    ids = token_ids(sp, text, max_length)
    n = len(ids)
    return (np.array(ids + [PAD_ID] * (max_length - n), np.int64),
            np.array([1] * n + [0] * (max_length - n), np.int64))


CORPUS = """\
A cat sits on a wooden table next to a window, watching the rain fall outside.
Two dogs run across a green field under a bright blue sky with white clouds.
A red car drives slowly along a mountain road at sunset, its headlights glowing.
The camera pans across a busy city street full of people, bicycles and taxis.
An astronaut floats inside a space station, looking down at the Earth below.
A small boat sails on a calm lake surrounded by tall pine trees and snowy peaks.
Close-up of a chef slicing fresh vegetables on a cutting board in a bright kitchen.
A girl in a yellow raincoat jumps into a puddle and laughs as the water splashes.
Waves crash against black rocks while seagulls circle above the foamy sea.
A golden retriever catches a frisbee in mid-air on a sunny beach.
Slow motion shot of coffee being poured into a white cup, steam rising gently.
A train crosses a long stone bridge over a deep valley in early morning fog.
Fireworks explode over a river at night, reflecting in the dark water.
An old man plays the violin on a street corner while pedestrians walk past.
A butterfly lands on a purple flower in a garden full of bees and sunlight.
The drone flies over a dense forest, revealing a hidden waterfall and a river.
A horse gallops through tall grass, its mane flowing in the wind.
Children build a sandcastle on the shore as the tide slowly comes in.
A neon sign flickers above a rainy alley in a futuristic city at midnight.
Snow falls quietly on a small village with warm lights in every window.
A panda eats bamboo in a misty forest, then rolls over onto its back.
The photographer adjusts the lens while a model poses in front of a brick wall.
A hot air balloon rises above fields of lavender in the soft evening light.
A robot walks through an abandoned factory, scanning the walls with a blue light.
Leaves change color from green to orange and red in a time-lapse of autumn.
A chess player thinks carefully before moving the queen across the board.
A cyclist rides down a steep hill, passing farms, cows and wooden fences.
The moon rises behind a lighthouse as clouds drift across the starry sky.
A jazz band performs in a crowded club, the saxophone player in the spotlight.
A family shares dinner at a long table, talking and laughing together.
A squirrel collects acorns and hides them under the roots of an oak tree.
The ballet dancer spins on stage, her white dress moving like a cloud.
Lightning strikes the ocean during a violent storm, lighting up the waves.
A vintage motorcycle is parked outside a diner on an empty desert highway.
Smoke rises from a campfire where friends roast marshmallows and sing songs.
A koi fish swims in a clear pond beneath floating lotus leaves.
Café crème, brûlée and crêpes are served in São Paulo, Zürich and Kraków.
Prices: 12 apples cost $3.50, 100 grams of tea cost 7 euros & 20 cents.
Don't stop! It's 5 o'clock; the show starts at 6:30 (or maybe 7).
A tiger walks slowly through the jungle, its stripes hidden among the shadows.
Rain drops slide down the glass of a café window while music plays inside.
A farmer drives a tractor across golden wheat fields during the harvest season.
The city skyline glitters at night as helicopters fly between the towers.
A woman reads a book under a cherry tree, pink petals falling around her.
Penguins waddle across the ice and dive one by one into the freezing water.
A painter mixes blue and yellow paint on a palette to create a bright green.
Steam trains, sailing ships and airplanes appear in an old black and white film.
A baby elephant sprays water over its mother at a muddy river bank.
The knight raises his sword as the dragon breathes fire over the castle walls.
A street market sells fruit, spices, fish, bread and handmade jewelry.
Astronomers watch a comet through a giant telescope on a cold mountain top.
A little boy flies a kite shaped like a fish high above the windy hills.
Water boils in a pot while the cook stirs the soup with a wooden spoon.
A surfer rides a huge wave, the spray glowing orange in the setting sun.
Autumn leaves swirl around a bench in a quiet park after the rain.
A mechanic repairs an engine, his hands covered in oil and grease.
Clouds move quickly over the desert, their shadows racing across the dunes.
A group of friends dance at a wedding party under strings of warm lights.
The scientist mixes two liquids in a glass flask and a purple smoke appears.
A fox sneaks through the snow at dawn, leaving small footprints behind.
Traffic lights change from red to green as cars begin to move forward.
An owl turns its head and blinks its large yellow eyes in the moonlight.
A musician tunes a guitar before stepping onto the stage to play a song.
Giant whales swim beneath a small fishing boat in the deep blue ocean.
A candle burns on a table, its flame flickering in a gentle breeze.
Skiers race down a snowy slope, turning sharply between the red flags.
The crowd cheers as the runner crosses the finish line with raised arms.
A wooden cabin stands alone by a frozen lake under the northern lights.
A bee collects pollen from sunflowers that turn slowly to follow the sun.
Realistic, cinematic, 4K, high detail, soft lighting, shallow depth of field.
Bright colors, overexposed, static, blurred details, subtitles, worst quality, low quality.
"""


def train_tiny_tokenizer(out_path, vocab_size=500):
    """Train the tiny unigram model and copy it to out_path (spiece.model)."""
    tmp = tempfile.mkdtemp(prefix="wan_spm_")
    try:
        with open(os.path.join(tmp, "corpus.txt"), "w", encoding="utf-8") as f:
            f.write(CORPUS)
        subprocess.run(["spm_train", "--input=corpus.txt", "--model_prefix=spiece", "--model_type=unigram",
                        f"--vocab_size={vocab_size}", "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1",
                        "--character_coverage=1.0", "--num_threads=1", "--input_sentence_size=0",
                        "--shuffle_input_sentence=false", "--minloglevel=2"],
                       cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
        shutil.copyfile(os.path.join(tmp, "spiece.model"), out_path)
    finally:
        shutil.rmtree(tmp)
