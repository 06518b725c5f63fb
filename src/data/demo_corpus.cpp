// The demo corpus text (written for this project).
#include "data/demo_corpus.h"

namespace llamatrain::data {

std::string_view demo_corpus() {
  static constexpr std::string_view kText =
      "The river ran past the old mill and under the stone bridge, and every morning the miller walked "
      "down to the water to see how high it had risen in the night. In spring the river was loud and "
      "brown and full of melted snow from the hills. In summer it was slow and green, and children came "
      "to sit on the bridge and drop sticks into the water to see whose stick would win the race to the "
      "other side.\n"
      "The miller had a daughter who liked numbers more than flour. She counted the turns of the wheel, "
      "the sacks on the cart, the birds on the roof, and the steps from the door to the river. One day "
      "she asked her father why the wheel turned faster in spring than in summer. He said that the river "
      "was stronger in spring. She asked why the river was stronger, and he said that the snow on the "
      "hills had melted. She asked why the snow melted, and he laughed and said that the sun was warmer. "
      "She wrote all of it down in a small book, one question on each line and one answer after it.\n"
      "When she was older she built a small wheel of her own from wood and string, and she put it in the "
      "stream behind the house. She measured how many times it turned in a minute on each day of the "
      "year, and she drew the numbers as a line across a page. The line rose in spring and fell in "
      "summer, rose a little with the autumn rain and lay flat under the winter ice. Her father looked at "
      "the page for a long time and said that she had drawn the river.\n"
      "A model that reads text learns in a similar way. It reads a line, guesses the next letter, and "
      "looks at the letter that really came. When the guess is wrong it changes a little, and when the "
      "guess is right it changes less. After many lines the guesses get better, and the model starts to "
      "write words, then phrases, then sentences that sound like the text it has read. It does not know "
      "what a river is, but it knows that the word river is often followed by ran, or was, or water.\n"
      "The miller's daughter would have liked that. She would have counted the guesses and drawn them as "
      "a line across a page, and the line would have fallen quickly at first and then slowly, like the "
      "river after the spring floods, until it lay almost flat. Then she would have asked why it did not "
      "fall to zero, and the answer is that some letters cannot be guessed: the name of a new bird, the "
      "number of sacks on a new day, the first word of a story that has not been told yet.\n";
  return kText;
}

}  // namespace llamatrain::data
