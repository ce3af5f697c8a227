"""The built-in prompt set for self-distillation data: instructions, questions, writing,
code, math, rewriting, role-play, extraction, reasoning and essay tasks, plus raw-text openers,
generated from topic x task lists (written for pymtp; no evaluation set's questions).

``build_prompts(n, seed)`` returns ``n`` distinct prompts, deterministic by seed; chat prompts are
lists of messages (rendered with the base's own chat template later), raw prompts are strings
(plain completion, as ``pymtp generate`` without ``--chat`` does).
"""

from __future__ import annotations

import random

TOPICS = (
    "photosynthesis", "black holes", "the water cycle", "plate tectonics", "climate change",
    "vaccines", "the human immune system", "DNA replication", "quantum computing", "machine learning",
    "blockchain", "the internet", "electric cars", "solar power", "nuclear fusion", "the Roman Empire",
    "the French Revolution", "the Industrial Revolution", "ancient Egypt", "the Renaissance",
    "the Cold War", "the printing press", "the Silk Road", "democracy", "inflation", "supply and demand",
    "compound interest", "the stock market", "cryptocurrency", "remote work", "urban gardening",
    "sleep", "meditation", "nutrition", "intermittent fasting", "marathon training", "chess",
    "jazz music", "impressionist painting", "film photography", "the Olympic Games", "volcanoes",
    "coral reefs", "honeybees", "migratory birds", "rainforests", "deserts", "the Moon landing",
    "Mars exploration", "the theory of relativity", "probability", "prime numbers", "game theory",
    "recycling", "coffee", "bread baking", "fermentation", "the history of tea", "public libraries",
    "video games", "social media", "smartphones", "cybersecurity", "password managers",
    "open-source software", "databases", "cloud computing", "operating systems", "compilers",
    "the human brain", "memory and learning", "language acquisition", "time management",
    "public speaking", "negotiation", "leadership", "minimalism", "architecture", "bridges",
    "earthquakes", "hurricanes", "the ocean tides", "antibiotics", "the placebo effect",
    "artificial intelligence ethics", "self-driving cars", "3D printing", "robotics", "space telescopes",
)

AUDIENCES = ("a five-year-old", "a high school student", "a busy executive", "a complete beginner",
             "an expert", "my grandmother", "a curious teenager", "a new employee")

EXPLAIN_TASKS = (
    "Explain {t} to {a}.",
    "What is {t}? Keep it short.",
    "Give me three interesting facts about {t}.",
    "What are the most common misconceptions about {t}?",
    "Write a short summary of {t} in one paragraph.",
    "How does {t} work? Explain step by step.",
    "Why does {t} matter? Give a few reasons.",
    "Compare {t} and {t2}. What do they have in common?",
    "What are the pros and cons of {t}?",
    "How has {t} changed over the last hundred years?",
    "Create a short quiz with four questions about {t}, with answers.",
    "Write an outline for a lecture about {t}.",
    "What should I read first if I want to learn about {t}?",
    "Describe {t} using an analogy.",
    "Answer in bullet points: what are the key ideas behind {t}?",
)

FORMS = ("a short story", "a poem", "a haiku", "a limerick", "a formal email", "a friendly letter",
         "a product description", "the opening paragraph of a blog post", "a short speech",
         "a dialogue between two friends", "a short news article", "a diary entry", "a song chorus",
         "a movie plot summary", "a restaurant review", "a motivational message", "a fairy tale",
         "a job advertisement", "a tweet", "a thank-you note")

SUBJECTS = ("a lost umbrella", "the first day of school", "a robot learning to cook", "a rainy Monday",
            "a lighthouse keeper", "a dragon who is afraid of fire", "moving to a new city",
            "a forgotten birthday", "a cat who runs a bookshop", "the last day of summer",
            "a time traveler in a supermarket", "a small town bakery", "an unexpected friendship",
            "a mountain hike", "a power outage", "a chess tournament", "an old photograph",
            "a garden in winter", "a space station", "learning to ride a bicycle", "a noisy neighbor",
            "a message in a bottle", "a broken clock", "the ocean at night", "a job interview",
            "a family recipe", "a library after closing time", "a marathon", "a new puppy", "a train journey")

TONES = ("", " Make it funny.", " Keep it under 100 words.", " Use a melancholic tone.",
         " Make it suitable for children.", " Write it in a formal style.", " Make it suspenseful.",
         " Use simple words.", "")

LANGUAGES = ("Python", "JavaScript", "TypeScript", "C", "C++", "Rust", "Go", "Java", "C#", "Ruby",
             "Bash", "SQL", "Kotlin", "Swift", "PHP")

CODE_TASKS = (
    "reverses a string", "checks whether a number is prime", "computes the n-th Fibonacci number",
    "sorts a list of numbers with merge sort", "performs binary search on a sorted array",
    "counts how often each word appears in a text", "checks whether a string is a palindrome",
    "merges two sorted lists", "removes duplicates from a list while keeping the order",
    "parses a CSV line into fields", "validates an email address", "converts Celsius to Fahrenheit",
    "finds the largest element in a list", "flattens a nested list", "computes the factorial of n",
    "reads a text file and prints the number of lines", "implements a stack", "implements a queue with two stacks",
    "computes the greatest common divisor of two numbers", "generates all permutations of a string",
    "checks whether parentheses in a string are balanced", "converts a decimal number to binary",
    "finds the intersection of two arrays", "capitalizes the first letter of every word",
    "implements a simple LRU cache", "computes the average of a list, ignoring missing values",
    "rotates a matrix by 90 degrees", "counts the vowels in a string",
    "finds the longest common prefix of a list of strings",
    "implements depth-first search on a graph",
)

CODE_TEMPLATES = (
    "Write a {lang} function that {task}.",
    "Show me how to write code in {lang} that {task}. Explain the code briefly.",
    "Write a {lang} program that {task}, with comments.",
    "Write unit tests in {lang} for a function that {task}.",
    "What is the time complexity of a function that {task}? Give a {lang} implementation.",
    "I am learning {lang}. How would I write something that {task}?",
)

CODE_QUESTIONS = (
    "What is the difference between a list and a tuple in Python?",
    "Explain recursion with a simple example.",
    "What does the 'static' keyword mean in Java?",
    "How do promises work in JavaScript?",
    "What is a race condition and how can I avoid it?",
    "Explain the difference between git merge and git rebase.",
    "What is a pointer in C?",
    "How do I read a JSON file in Python?",
    "What is dependency injection?",
    "Explain Big O notation with examples.",
    "What is the difference between a process and a thread?",
    "How does garbage collection work?",
    "What are SQL joins? Give an example of each kind.",
    "Explain what a REST API is.",
    "What is the borrow checker in Rust?",
    "How do I undo the last commit in git?",
    "What is the difference between == and === in JavaScript?",
    "Explain what a hash map is and when to use one.",
    "How do I make an HTTP request in Python?",
    "What is a virtual environment and why should I use one?",
)

HOWTO = ("plan a weekly budget", "prepare for a job interview", "start running as a beginner",
         "learn a new language quickly", "organize my closet", "cook rice perfectly",
         "write a good cover letter", "improve my sleep", "take better photos with my phone",
         "stay focused while studying", "care for a houseplant", "make a cup of pour-over coffee",
         "save money on groceries", "start a vegetable garden", "write a resume", "change a flat tire",
         "make new friends in a new city", "prepare for a long flight", "keep a journal",
         "reduce stress at work", "bake chocolate chip cookies", "learn to play the guitar",
         "set up a home network", "train a puppy", "give constructive feedback", "plan a birthday party",
         "clean a laptop keyboard", "memorize a speech", "pick a good password", "read more books")

HOWTO_TEMPLATES = ("How do I {h}?", "Give me step-by-step instructions to {h}.",
                   "What are some tips to {h}?", "I want to {h}. Where should I start?",
                   "What mistakes should I avoid when I try to {h}?")

SENTENCES = (
    "the meeting has been moved to thursday because the manager is sick",
    "i dont think we should buy the car its too expensive for us right now",
    "The quarterly results exceeded expectations, driven by strong sales in Europe.",
    "Our team will launch the new website next month after final testing.",
    "The weather was terrible, but we still enjoyed the trip to the mountains.",
    "Please send me the report before the end of the day.",
    "He has been learning to play the piano for three years.",
    "The restaurant on the corner serves the best pasta in town.",
    "She forgot her keys at home, so she had to wait for her brother.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The library will be closed on Monday for maintenance.",
    "I really loved the movie, although the ending was a bit predictable.",
    "Customers can return items within thirty days of purchase.",
    "The train was delayed by forty minutes due to a signal failure.",
    "We need to reduce our energy consumption by twenty percent this year.",
)

REWRITE_TEMPLATES = (
    "Rewrite this sentence to sound more formal: \"{s}\"",
    "Fix the grammar and punctuation: \"{s}\"",
    "Translate into French: \"{s}\"",
    "Translate into Spanish: \"{s}\"",
    "Translate into German: \"{s}\"",
    "Make this sentence shorter: \"{s}\"",
    "Rewrite this as a question: \"{s}\"",
    "Is the following sentence positive, negative or neutral? \"{s}\"",
    "Paraphrase the following sentence in two different ways: \"{s}\"",
    "Turn this sentence into a short tweet with a hashtag: \"{s}\"",
)

BRAINSTORM = ("names for a coffee shop", "gift ideas for a teacher", "weekend activities for a family",
              "topics for a science fair project", "healthy breakfast ideas", "names for a fantasy kingdom",
              "ways to reuse glass jars", "icebreaker questions for a team meeting", "themes for a costume party",
              "slogans for a bike repair shop", "questions to ask in a job interview", "ideas for a short film",
              "ways to make a small apartment feel bigger", "indoor activities for a rainy day",
              "features for a to-do list app")

SYSTEM_PROMPTS = ("You are a helpful assistant.", "You are a concise assistant. Answer briefly.",
                  "You are a friendly tutor who explains things clearly.",
                  "You are an expert programmer.", "You are a creative writer.",
                  "Answer as accurately as you can.")

RAW_OPENERS = (
    "Once upon a time, {s}",
    "The history of {t} is",
    "# An introduction to {t}\n\n",
    "Chapter 1\n\nIt was the morning of {s} when",
    "Dear friend,\n\nI am writing to tell you about {s}.",
    "Q: What is {t}?\nA:",
    "Here are five things everyone should know about {t}:\n\n1.",
    "def {fn}(",
    "// {Lang} example: a function that {task}\n",
    "In this article, we will discuss {t}.",
    "The following is a transcript of a lecture about {t}.\n\n",
    "Recipe: {dish}\n\nIngredients:\n",
)

DISHES = ("tomato soup", "banana bread", "vegetable curry", "pancakes", "lemon cake", "fried rice",
          "guacamole", "apple pie", "lentil stew", "pizza dough")

FUNCTION_NAMES = ("parse_config", "binary_search", "merge_sorted", "is_prime", "word_count",
                  "flatten", "fibonacci", "read_lines", "normalize_vector", "to_snake_case")

PERSONAS = ("a pirate captain", "a medieval knight", "a detective in 1920s London", "a tour guide in Rome",
            "a patient customer support agent", "a football coach at half-time", "a family doctor",
            "a famous chef", "an astronaut on the space station", "a wise old wizard", "a startup founder",
            "a park ranger", "a stand-up comedian", "a museum curator", "a personal fitness trainer",
            "a ship's navigator", "a librarian", "a travel blogger", "a career counselor", "a mathematics teacher",
            "a sommelier", "a city mayor", "a gardener", "a radio host", "a job interviewer")

ROLE_TASKS = ("Introduce yourself and describe a typical day.", "A visitor asks you for advice. What do you say?",
              "Describe the most difficult moment of your career.", "Give a short pep talk to someone who is nervous.",
              "Someone complains that they are bored. How do you respond?",
              "Explain your job to a child.", "What is the best lesson you have learned?",
              "Answer the question: what should I do this weekend?", "Describe your favourite place.",
              "A stranger asks you what makes you happy. Reply in character.")

ROLE_TEMPLATES = ("Pretend you are {p}. {task}", "You are {p}. Stay in character. {task}",
                  "Imagine you are {p}. {task} Keep it under 150 words.",
                  "Act as {p}. {task}")

NAMES = ("Maria Lopez", "John Smith", "Aiko Tanaka", "Ravi Patel", "Fatima Ahmed", "Lukas Weber",
         "Chen Wei", "Olga Ivanova", "Kwame Mensah", "Sofia Rossi", "Liam O'Brien", "Amara Okafor")
COMPANIES = ("Northwind Labs", "BlueRiver Foods", "Helix Robotics", "Greenleaf Energy", "Atlas Books",
             "Quantum Bikes", "Sunrise Health", "Copperline Media", "Polar Logistics", "Maple Software")
CITIES = ("Berlin", "Nairobi", "Osaka", "Toronto", "Lima", "Lyon", "Melbourne", "Mumbai", "Oslo", "Austin")
PRODUCTS = ("electric scooters", "organic snacks", "warehouse robots", "solar panels", "audiobooks",
            "folding bicycles", "fitness trackers", "podcasts", "delivery software", "accounting tools")

EXTRACT_TASKS = ("Extract every person, company, city and year from the text above as JSON.",
                 "Summarize the text above in one sentence.",
                 "List all the numbers in the text above and say what each one refers to.",
                 "Write three questions that can be answered from the text above, with their answers.",
                 "Turn the text above into a table with the columns: field, value.",
                 "What is the main point of the text above? Answer in two sentences.",
                 "Rewrite the text above for a press release.")

REASON_NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Hassan", "Ines", "Jonas")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

ESSAY_TEMPLATES = (
    "Describe the main causes and consequences of {t}.",
    "Evaluate the arguments for and against {t}. Conclude with your own view.",
    "Write a short essay about {t} for a university course.",
    "How would you teach {t} in a one-hour class? Describe the plan.",
    "Discuss the ethical questions raised by {t}.",
    "What are the open problems in {t} today?",
    "Explain the history of {t} in five key events.",
    "Write a persuasive paragraph convincing a skeptic that {t} is important.",
    "What would the world look like without {t}?",
    "Summarize what scientists and historians agree on about {t}, and where they disagree.",
)

# (category, weight)
CATEGORIES = (("explain", 20), ("write", 14), ("code", 14), ("code_q", 4), ("howto", 8),
              ("math", 10), ("rewrite", 6), ("brainstorm", 4), ("raw", 8), ("roleplay", 6),
              ("extract", 6), ("reason", 6), ("essay", 8))


def _math_problem(r: random.Random) -> str:
    a, b, c = r.randint(2, 99), r.randint(2, 99), r.randint(2, 12)
    kind = r.randrange(14)
    if kind == 0:
        return f"A train travels {a * c} km in {c} hours. What is its average speed? Explain your reasoning."
    if kind == 1:
        return f"Solve for x: {c}x + {a} = {a + c * b}. Show your steps."
    if kind == 2:
        return f"What is {a}% of {b * 10}? Explain how to compute it."
    if kind == 3:
        return f"I have {a} apples and give away {min(a, b) // 2}. Then I buy {c} more. How many do I have?"
    if kind == 4:
        return f"Convert {a} miles to kilometers and explain the conversion."
    if kind == 5:
        return f"What is {a} times {b}? Show the calculation step by step."
    if kind == 6:
        return (f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?")
    if kind == 7:
        return f"If a shirt costs ${a} and is discounted by {c * 5}%, what is the final price?"
    if kind == 8:
        return f"Two fair dice are rolled. What is the probability that the sum is {min(c, 11) + 1}? Explain."
    if kind == 9:
        return f"The vertices of a triangle are (0, 0), ({c}, 0) and (0, {b % 20 + 1}). Find its area."
    if kind == 10:
        return f"Solve the system: x + y = {a + b}, x - y = {a - b}. Show your work."
    if kind == 11:
        return f"What is the sum of the integers from 1 to {a + 10}? Explain the formula you use."
    if kind == 12:
        return f"${a * 100} is invested at {c}% annual interest, compounded yearly. How much is there after 3 years?"
    return f"Find the next two numbers in the sequence {c}, {2 * c}, {4 * c}, {8 * c}, ... and explain the rule."


def _extract_passage(r: random.Random) -> str:
    name, other = r.sample(NAMES, 2)
    return (f"{name} founded {r.choice(COMPANIES)} in {r.randint(1985, 2022)} in {r.choice(CITIES)}. "
            f"The company makes {r.choice(PRODUCTS)} and employs {r.randint(12, 4000)} people. "
            f"In {r.randint(2015, 2025)} it opened an office in {r.choice(CITIES)}, led by {other}, "
            f"and its revenue grew by {r.randint(3, 60)}%.")


def _reasoning_problem(r: random.Random) -> str:
    a, b, c = r.sample(REASON_NAMES, 3)
    kind = r.randrange(6)
    if kind == 0:
        return f"{a} is taller than {b}. {b} is taller than {c}. Who is the shortest? Explain your reasoning."
    if kind == 1:
        d, n = r.choice(DAYS), r.randint(2, 40)
        return f"Today is {d}. What day of the week will it be in {n} days? Think step by step."
    if kind == 2:
        n = r.randint(3, 9)
        return f"{a} has {n} siblings and every sibling has the same number of brothers. Is that possible? Explain."
    if kind == 3:
        return (f"{a}, {b} and {c} each own a different pet: a cat, a dog and a parrot. {a} does not own the cat. "
                f"{b} owns the parrot. Who owns which pet?")
    if kind == 4:
        x = r.randint(2, 9)
        return (f"If {x} machines make {x} widgets in {x} minutes, how long do {x * 10} machines take "
                f"to make {x * 10} widgets?")
    return (f"A bat and a ball cost ${r.randint(2, 9)}.10 in total. The bat costs $1.00 more than the ball. "
            f"How much does the ball cost? Explain.")


def _one(r: random.Random):
    cat = r.choices([c for c, _ in CATEGORIES], weights=[w for _, w in CATEGORIES])[0]
    if cat == "explain":
        t, t2 = r.sample(TOPICS, 2)
        text = r.choice(EXPLAIN_TASKS).format(t=t, t2=t2, a=r.choice(AUDIENCES))
    elif cat == "write":
        text = f"Write {r.choice(FORMS)} about {r.choice(SUBJECTS)}.{r.choice(TONES)}"
    elif cat == "code":
        text = r.choice(CODE_TEMPLATES).format(lang=r.choice(LANGUAGES), task=r.choice(CODE_TASKS))
    elif cat == "code_q":
        text = r.choice(CODE_QUESTIONS)
    elif cat == "howto":
        text = r.choice(HOWTO_TEMPLATES).format(h=r.choice(HOWTO))
    elif cat == "math":
        text = _math_problem(r)
    elif cat == "rewrite":
        text = r.choice(REWRITE_TEMPLATES).format(s=r.choice(SENTENCES))
    elif cat == "brainstorm":
        text = f"Give me {r.randint(3, 10)} {r.choice(BRAINSTORM)}."
    elif cat == "roleplay":
        text = r.choice(ROLE_TEMPLATES).format(p=r.choice(PERSONAS), task=r.choice(ROLE_TASKS))
    elif cat == "extract":
        text = f"{_extract_passage(r)}\n\n{r.choice(EXTRACT_TASKS)}"
    elif cat == "reason":
        text = _reasoning_problem(r)
    elif cat == "essay":
        text = r.choice(ESSAY_TEMPLATES).format(t=r.choice(TOPICS))
    else:
        return r.choice(RAW_OPENERS).format(
            s=r.choice(SUBJECTS), t=r.choice(TOPICS), fn=r.choice(FUNCTION_NAMES),
            Lang=r.choice(LANGUAGES), task=r.choice(CODE_TASKS), dish=r.choice(DISHES))
    messages = []
    if r.random() < 0.25:
        messages.append({"role": "system", "content": r.choice(SYSTEM_PROMPTS)})
    messages.append({"role": "user", "content": text})
    return messages


def _text_of(prompt) -> str:
    return prompt if isinstance(prompt, str) else "\x00".join(m["content"] for m in prompt)


def build_prompts(n: int, seed: int = 0) -> list:
    """``n`` prompts, distinct while the generator finds new ones (it can make many thousands)."""
    r = random.Random(seed)
    out, seen = [], set()
    misses = 0                         # draws in a row that found only repeats
    while len(out) < n:
        p = _one(r)
        key = _text_of(p)
        if key in seen and misses < 200:
            misses += 1
            continue
        misses = 0
        seen.add(key)
        out.append(p)
    return out


MAX_UNIQUE_PROMPTS = 60000


def unique_prompts(samples: int, seed: int = 0) -> list:
    """The distinct prompts a data set of ``samples`` generated sequences cycles through."""
    return build_prompts(max(2, min(samples, MAX_UNIQUE_PROMPTS)), seed=seed)
